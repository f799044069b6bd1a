"""The data pipeline: databases, Datum decoding, image I/O, transforms and prefetching."""
