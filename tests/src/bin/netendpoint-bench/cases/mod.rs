//! The cases, one module each.

pub(crate) mod admission;
pub(crate) mod at_once;
pub(crate) mod churn;
pub(crate) mod controller;
pub(crate) mod exclude;
pub(crate) mod fanout;
pub(crate) mod footprint;
pub(crate) mod large;
pub(crate) mod latency;
pub(crate) mod lean;
pub(crate) mod nodes;
pub(crate) mod replace;
pub(crate) mod requests;
pub(crate) mod reuse;
pub(crate) mod scale;
pub(crate) mod status;
pub(crate) mod sticky;
pub(crate) mod stopped;
pub(crate) mod tiny;
