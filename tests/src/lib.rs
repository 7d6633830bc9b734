//! Harness for multi-node druse scenarios.
