"""Differential checks against BVLC Caffe itself (run by hand where a Caffe build is at hand):
random cases in the golden format, log comparison, refusals. See fidelity/README.md."""
