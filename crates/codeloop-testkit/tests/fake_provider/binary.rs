//! The binary.
