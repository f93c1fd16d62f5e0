//! What every module of the harness uses: the external items, and the
//! harness's own shared parts.

pub(crate) use std::collections::HashMap;
pub(crate) use std::fmt::Write as _;
pub(crate) use std::io::{Read, Write};
pub(crate) use std::net::{Ipv4Addr, TcpStream};
pub(crate) use std::path::PathBuf;
pub(crate) use std::process::{Command, Stdio};
pub(crate) use std::sync::Mutex;
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
pub(crate) use std::time::{Duration, Instant};

pub(crate) use k8s_openapi::api::core::v1::Node;
pub(crate) use kube::api::{Api, DeleteParams, GetParams, ListParams, ObjectMeta, PostParams};
pub(crate) use netendpoint_crd::{
    ANNOTATION_FORCE_RELEASE_AFTER, LABEL_IP_FAMILY, LABEL_NETWORK, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
    LABEL_POOL, NetworkEndpoint, PodRef, endpoint_name, label_value,
};
pub(crate) use serde_json::{Value, json};

pub(crate) use crate::cases::at_once::*;
pub(crate) use crate::cases::churn::*;
pub(crate) use crate::cases::latency::Series;
pub(crate) use crate::cases::lean::*;
pub(crate) use crate::harness::*;
pub(crate) use crate::server::*;
