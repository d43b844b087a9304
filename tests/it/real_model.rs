//! A real model: see below.
