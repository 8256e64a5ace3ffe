//! Weir's end-to-end tests. Every test starts the real `weir` binary on a
//! free loopback port with its own data folder and talks to it over the
//! wire; servers are stopped by their process id when the test ends.

mod backfill;
mod bad_input;
mod cdc;
mod cluster;
mod common;
mod crash;
mod differential;
mod drivers;
mod files;
mod fuzz;
mod indexes;
mod kafka;
mod kafka_broker;
mod kafka_wire;
mod nexmark;
mod orders;
mod pipeline;
mod protocol;
mod psql;
mod reference_postgres;
mod s3;
mod shared_readers;
mod sinks;
mod slt;
mod sources;
mod subscribe;
mod transactions;
mod unique;
mod upgrade;
mod view_memory;
mod view_property;
mod write_path;
