//! End-to-end tests of Warden live in `tests/`; this library is empty.
