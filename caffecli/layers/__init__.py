"""Built-in layers, one family per module; importing this package registers them all.

Every module here is imported automatically, so adding a family means adding a file.
"""
import importlib
import pkgutil

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(__name__ + "." + _info.name)
