"""Built-in layers, one type per module named after it (registry.module_name): ``ReLU`` in
relu.py, ``InnerProduct`` in inner_product.py. Modules starting with ``_`` hold what a family
of types shares. A net imports only the modules of the types it uses; ``load_all`` imports
every one (to list the types)."""
import importlib
import pkgutil


def load_all():
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(__name__ + "." + info.name)
