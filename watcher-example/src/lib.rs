//! `watcher-example`: the reference downstream agent of netendpoint.
//!
//! A per-node agent that watches the `NetworkEndpoint`s of its node and keeps
//! one rule per IP in a [`dataplane::Dataplane`] (a route table, in the Linux
//! implementation). It holds a finalizer on every endpoint of its node, removes
//! the rule when the endpoint is being released, and only then removes its own
//! finalizer, so the IP cannot be handed to a new pod while the old rule is
//! still installed. See `README.md` for the protocol explained to agent authors.
//!
//! The crate is a library plus the `watcher-example` binary, so that the logic
//! that turns watch events into dataplane state ([`agent::Agent`]) can be tested
//! by feeding it endpoints directly, without a cluster.

pub mod agent;
pub mod config;
pub mod controller;
pub mod dataplane;
pub mod error;
pub mod eventlog;
pub mod finalizer;
pub mod http;
pub mod metrics;

pub use error::{Error, Result};
