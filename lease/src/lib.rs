//! The lease vocabulary of netendpoint, shared by the CNI plugin, the
//! controller and the kubectl plugin, as Calico's IPAM library is shared by
//! its plugin, controllers and calicoctl:
//! - [`view`]: the one [`Lease`] view, read from spec and name;
//! - [`addr`]: addresses as integers, and back;
//! - [`patch`]: the patches that change a lease, each testing what it acts on;
//! - [`outcome`]: a refused guarded write, told from an error (gone or changed);
//! - [`labels`]: the labels that mirror a lease's spec;
//! - [`hold`]: the sticky hold protocol (requests, incarnations, release);
//! - [`events`]: Events and the references they are about;
//! - [`clock`]: the API server's clock and ages measured on it;
//! - [`connect`]: kube's client stack, with `TCP_NODELAY`;
//! - [`rules`]: when a release is stuck, and "seen twice, then a grace";
//! - [`pools`]: pool accounting (capacity, in use, releasing, free);
//! - [`queue`]: which waiting ADD of a full pool each address is promised to;
//! - [`summary`]: the shard bitmaps and pool counts ADDs read as a hint.
//!
//! Nothing here makes an API call ([`connect`] builds the client that does).

pub mod addr;
pub mod clock;
pub mod connect;
pub mod events;
pub mod hold;
pub mod labels;
pub mod outcome;
pub mod patch;
pub mod pools;
pub mod queue;
pub mod rules;
pub mod summary;
pub mod view;

pub use clock::{ServerClock, age_at_least};
pub use rules::{ReleaseState, Seen, Sightings, release_state};
pub use view::Lease;
