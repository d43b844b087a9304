//! Integration tests: real HTTP on loopback, real sled dirs, the real binary.

mod harness;

mod auth;
mod callback;
mod ops_cli;
mod telegram;
