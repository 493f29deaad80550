"""Measuring the product's own selection: benchmark readers (`benchmarks`), metrics (`metrics`),
the evaluation harness (`evaluate`) and ranker training and cross-validation (`train`)."""
