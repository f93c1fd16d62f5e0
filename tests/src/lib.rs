//! Shared harness for netendpoint's integration tests.
//!
//! Every test here talks to the real kube-apiserver started by
//! `scripts/testenv.sh` (the Makefile's `test` target does this and exports
//! `NETENDPOINT_KUBECONFIG`), and to the reference CNI plugins built into
//! `tests/bin/cni`. Nothing is mocked. Tests isolate themselves by using a
//! unique pool (and so unique object names) and their own network namespaces.
//!
//! One module per concern; everything but the trust tests' own fixtures
//! ([`trust`]) is also re-exported here, so a test names
//! `netendpoint_tests::cleanup_pool` as readily as
//! `netendpoint_tests::leases::cleanup_pool`.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod agents;
pub mod controller;
pub mod deploy;
pub mod env;
pub mod events;
pub mod fixtures;
pub mod identities;
pub mod kubectl;
pub mod leases;
pub mod net_conf;
pub mod netns;
pub mod own_server;
pub mod plugin;
pub mod probes;
pub mod scratch;
pub mod server_metrics;
pub mod trust;
pub mod wait;
pub mod watch;

pub use agents::*;
pub use controller::*;
pub use deploy::*;
pub use env::*;
pub use events::*;
pub use fixtures::*;
pub use identities::*;
pub use kubectl::*;
pub use leases::*;
pub use net_conf::*;
pub use netns::*;
pub use own_server::*;
pub use plugin::*;
pub use probes::*;
pub use scratch::*;
pub use server_metrics::*;
pub use wait::*;
pub use watch::*;
