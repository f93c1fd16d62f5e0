//! The network configuration of netendpoint, as host-local keeps its config
//! and allocator in a package beside a thin `main`: the CNI plugin, the
//! controller and `kubectl netendpoint` all read networks through this
//! crate, and none of them through another.
//!
//! - [`error`]: what can be wrong with a configuration;
//! - [`allocator`]: ranges, usable addresses and candidate order, pure (no
//!   Kubernetes, no I/O);
//! - [`config`]: the `ipam` section, validated whole, every duration capped;
//! - [`networks`]: what the cluster side reads of network config files
//!   (the networks, capacities, the ranges admission checks).
//!
//! A module imports only modules listed before it. Nothing
//! here makes an API call or logs: problems are returned, and warnings are
//! handed to the caller ([`IpamConfig::warnings`]).

pub mod allocator;
pub mod config;
pub mod error;
pub mod networks;

pub use allocator::{Range, RangeSet};
pub use config::{CrossNode, IpamConfig, LogConfig, Route, StaticIpsConfig, StickyConfig};
pub use error::{Error, Result};
