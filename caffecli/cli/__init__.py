"""The ``caffecli`` command: Caffe's ``caffe`` tool (train, test, time, device_query) and tools."""
