//! The passes of one replica: on every change it watches, and at the
//! latest when a grace or an interval ends, one pass publishes the pools'
//! metrics and, on the leader, takes the decided actions and writes the
//! summaries, the pools parameter and the pool statuses.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::Context;
use crate::decide::{self, Decision, Memory, Settings};
use crate::pool_status::PoolStatusWriter;
use crate::pools_param::PoolsParamWriter;
use crate::summary::{self, SummaryWriter};
use crate::watches::Stores;
use crate::{act, metrics, needs};
use tracing::{debug, warn};

/// A pass that takes this long is logged.
const SLOW_PASS: Duration = Duration::from_secs(1);

/// A full pass is due this many times the time its last one spent reading
/// the snapshot and deciding, after it ended. While ADDs wait, the passes
/// between serve only the queues; otherwise the next pass waits for it.
const FULL_PASS_SPACING: u32 = 2;
/// The longest a full pass waits for its turn.
const MAX_FULL_PASS_SPACING: Duration = Duration::from_millis(500);

/// The longest pause between two passes when nothing changes.
const IDLE_PASS: Duration = Duration::from_secs(30);

/// The pause before the next pass. Never a pass at once again: a timer due
/// now (a failed write, a grace that ends) waits for the summaries' own
/// interval, and nothing waits longer than an idle pass.
pub fn pause_after(look_again_in: Option<Duration>) -> Duration {
    look_again_in.map_or(IDLE_PASS, |d| d.clamp(summary::MIN_INTERVAL, IDLE_PASS))
}

/// Watch events that come within this time of the last pass's start are a
/// burst.
const BURST: Duration = Duration::from_millis(100);
/// How long a burst is left to land before the next pass.
const COALESCE: Duration = Duration::from_millis(20);

/// The wait before a pass woken by a watch event, `since_last` after the
/// last pass began. An event after a quiet spell (a DEL that frees an
/// address a waiter is queued for) is acted on at once; one that follows a
/// pass closely is part of a burst, whose next events are let land first,
/// so that a storm costs a pass per burst, not per event.
pub fn coalesce_before_pass(since_last: Duration) -> Duration {
    if since_last < BURST { COALESCE } else { Duration::ZERO }
}

/// The wait before a full pass that `full_due` allows at `now`: none while
/// ADDs wait (see [`Passes::spacing_left`]).
pub fn spacing_left(full_due: Option<Instant>, waiting: bool, now: Instant) -> Duration {
    match full_due {
        Some(due) if !waiting => due.saturating_duration_since(now),
        _ => Duration::ZERO,
    }
}

/// What a leadership term remembers.
#[derive(Default)]
struct Term {
    memory: Memory,
    needs: needs::Checked,
    summaries: SummaryWriter,
    pools: PoolsParamWriter,
    seen_needs: HashSet<String>,
}

/// What one replica's passes share from one pass to the next: the context,
/// the watches, the settings, the pool status writer, the pools parameter's
/// ConfigMap, and what the current leadership term remembers.
pub struct Passes {
    ctl: Arc<Context>,
    stores: Stores,
    settings: Settings,
    pools_param: Option<(String, String)>,
    pool_status: Option<PoolStatusWriter>,
    term: Term,
    /// When the next full pass is due: queue passes serve the waiters until
    /// then, and an ordinary event waits for it.
    full_due: Option<Instant>,
    /// The last pass found ADDs waiting (on the leader).
    waiting: bool,
    /// The time the last full pass spent on its snapshot and decisions.
    read_for: Duration,
}

impl Passes {
    /// The passes over `stores`, in a first term; `pools_param` names the
    /// pools parameter's ConfigMap, `pool_status` writes the pool statuses.
    pub fn new(
        ctl: Arc<Context>,
        stores: Stores,
        settings: Settings,
        pools_param: Option<(String, String)>,
        pool_status: Option<PoolStatusWriter>,
    ) -> Self {
        Self {
            ctl,
            stores,
            settings,
            pools_param,
            pool_status,
            term: Term::default(),
            full_due: None,
            waiting: false,
            read_for: Duration::ZERO,
        }
    }

    /// How long a pass woken by an ordinary watch event (not a queue
    /// entry's, not an urgent release's) waits, beyond the burst's
    /// coalescing: until the next full pass is due. A full pass takes its
    /// snapshot and decides over every lease, so under a steady churn of a
    /// large pool back-to-back passes would keep a core busy; spaced by
    /// [`FULL_PASS_SPACING`] times the cost of their snapshot and
    /// decisions, those take at most about a third of one. While ADDs wait,
    /// nothing is held back here: the pass then serves the queues first and
    /// spaces only its full part.
    pub fn spacing_left(&self) -> Duration {
        spacing_left(self.full_due, self.waiting, Instant::now())
    }

    /// Starts a new leadership term: every grace starts again, and every
    /// summary and pool status is written again.
    pub fn new_term(&mut self) {
        self.term = Term::default();
        self.full_due = None;
        self.waiting = false;
        if let Some(w) = self.pool_status.as_mut() {
            w.reset();
        }
    }

    /// One pass: metrics on every replica; summaries, the pools parameter and
    /// the actions on the leader. Its duration is exported, and a slow one
    /// is logged: whatever it decides (a reclaim, a summary, a promise when
    /// no queue pass runs first) waits that long.
    ///
    /// On the leader, while ADDs wait, every pass first serves the queues
    /// alone ([`Self::queue_pass`]), and the full pass follows only when
    /// it is due: [`FULL_PASS_SPACING`] times what the last one spent on its
    /// snapshot and decisions after it ended, [`MAX_FULL_PASS_SPACING`] at
    /// most. A release then reaches its waiter without waiting for a pass
    /// over every lease of the cluster.
    pub async fn pass(&mut self, is_leader: bool) -> Decision {
        let started = Instant::now();
        let queued = if is_leader { self.queue_pass().await } else { None };
        self.waiting = queued.is_some();
        if let (Some(mut d), Some(due)) = (queued, self.full_due)
            && started < due
        {
            let until = due - started;
            d.look_again_in = Some(d.look_again_in.map_or(until, |x| x.min(until)));
            return d;
        }
        let started = Instant::now();
        let decision = self.one_pass(is_leader).await;
        let took = started.elapsed();
        // Spaced by what a full pass costs the controller (its snapshot and
        // decisions), not by its API calls, and never by more than a bound:
        // the full pass also serves sticky incarnations, which wait for it.
        self.full_due = Some(Instant::now() + (self.read_for * FULL_PASS_SPACING).min(MAX_FULL_PASS_SPACING));
        self.ctl.metrics.observe_pass(took);
        if took >= SLOW_PASS {
            warn!(
                took_ms = took.as_millis(),
                leases = self.stores.lease_count(),
                "a slow full pass: its decisions and summaries waited this long"
            );
        }
        decision
    }

    /// Serves the queues over the waiters' pools alone (see
    /// [`decide::serve_queues`]): their entries checked, the promises and
    /// the releases forced for them written, then those pools' summaries,
    /// so that a promised address counts as taken. `None` when no ADD waits.
    async fn queue_pass(&mut self) -> Option<Decision> {
        let started = Instant::now();
        let ctl = &*self.ctl;
        let now = ctl.clock.now()?;
        let networks = self.stores.networks();
        let mut world = self.stores.queue_world(&networks)?;
        let read = started.elapsed();
        let term = &mut self.term;
        world.believed = term.needs.check_entries(&ctl.client, &world.waiters).await;
        let checked = started.elapsed();
        let mut decision = decide::serve_queues(&world, &self.settings, &mut term.memory, now);
        let decided = started.elapsed();
        for action in &decision.actions {
            act::act(ctl, action).await;
        }
        let acted = started.elapsed();
        let pools: HashSet<String> = world.waiters.iter().map(|w| w.pool.clone()).collect();
        // As the full pass would: the summaries of these pools' leases, and
        // an empty one for those of them that a network config names.
        let configured: HashSet<String> =
            networks.iter().map(|n| n.pool.clone()).filter(|p| pools.contains(p)).collect();
        let promised = decide::promised(&world, &decision);
        let wanted = summary::wanted(&world.leases, &world.holds, &promised, &configured);
        let later = term.summaries.sync_pools(&ctl.client, &wanted, now, Some(&pools)).await;
        ctl.metrics.add_summary_writes(term.summaries.take_writes());
        if let Some(l) = later {
            decision.look_again_in = Some(decision.look_again_in.map_or(l, |d| d.min(l)));
        }
        let took = started.elapsed();
        ctl.metrics.observe_queue_pass(took);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        debug!(
            waiters = world.waiters.len(),
            leases = world.leases.len(),
            actions = decision.actions.len(),
            snapshot_ms = ms(read),
            entries_checked_ms = ms(checked - read),
            decided_ms = ms(decided - checked),
            written_ms = ms(acted - decided),
            summaries_ms = ms(took - acted),
            "queue pass"
        );
        Some(decision)
    }

    async fn one_pass(&mut self, is_leader: bool) -> Decision {
        let started = Instant::now();
        let ctl = &*self.ctl;
        let term = &mut self.term;
        ctl.metrics.set_leader(is_leader);
        let Some(now) = ctl.clock.now() else { return Decision::default() };
        let networks = self.stores.networks();
        let needs = if is_leader { term.needs.check(&ctl.client, &self.stores.needs(), now).await } else { Vec::new() };
        let reading = Instant::now();
        let mut world = self.stores.world(needs, &networks);
        let mut read_for = reading.elapsed();
        if is_leader {
            world.believed = term.needs.check_entries(&ctl.client, &world.waiters).await;
        }
        ctl.metrics.set_queues(&world.waiters, now);
        let stats = metrics::pool_stats(&world.leases, &world.capacity, now);
        ctl.metrics.set_pools(&stats);
        let keys: HashSet<String> =
            world.needs.iter().map(|n| n.key.clone()).chain(world.waiters.iter().map(|w| w.uid.clone())).collect();
        for n in world.needs.iter().filter(|n| !term.seen_needs.contains(&n.key)) {
            ctl.metrics.needed(&n.pool);
        }
        for w in world.waiters.iter().filter(|w| !term.seen_needs.contains(&w.uid)) {
            ctl.metrics.needed(&w.pool);
        }
        term.seen_needs = keys;
        if !is_leader {
            return Decision::default();
        }
        let deciding = Instant::now();
        let mut decision = decide::decide(&world, &self.settings, &mut term.memory, now);
        read_for += deciding.elapsed();
        self.read_for = read_for;
        let decided = started.elapsed();
        for action in &decision.actions {
            act::act(ctl, action).await;
        }
        let acted = started.elapsed();
        let pools: HashSet<String> = networks.iter().map(|n| n.pool.clone()).collect();
        let promised = decide::promised(&world, &decision);
        let wanted = summary::wanted(&world.leases, &world.holds, &promised, &pools);
        let mut later = term.summaries.sync(&ctl.client, &wanted, now).await;
        let summarised = started.elapsed();
        ctl.metrics.add_summary_writes(term.summaries.take_writes());
        if let Some((ns, name)) = &self.pools_param {
            term.pools.sync(ctl, ns, name, &networks, self.stores.pools_param().as_ref()).await;
        }
        if let Some(w) = self.pool_status.as_mut()
            && let Some(l) = w.sync(&ctl.client, &stats, now).await
        {
            later = Some(later.map_or(l, |x| x.min(l)));
        }
        if let Some(l) = later {
            decision.look_again_in = Some(decision.look_again_in.map_or(l, |d| d.min(l)));
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        debug!(
            leases = world.leases.len(),
            actions = decision.actions.len(),
            // From the pass's start: the needs' and entries' checks (Pod
            // GETs for new ones) and `snapshot_and_decisions_ms`.
            read_and_decided_ms = ms(decided),
            snapshot_and_decisions_ms = ms(self.read_for),
            written_ms = ms(acted - decided),
            summaries_ms = ms(summarised - acted),
            rest_ms = ms(started.elapsed() - summarised),
            "full pass"
        );
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_due_at_once_waits_for_the_summaries_interval() {
        assert_eq!(pause_after(Some(Duration::ZERO)), summary::MIN_INTERVAL, "no busy loop of passes");
        assert_eq!(pause_after(Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(pause_after(Some(Duration::from_secs(600))), IDLE_PASS);
        assert_eq!(pause_after(None), IDLE_PASS);
    }

    #[test]
    fn an_ordinary_event_waits_for_the_full_pass_due_unless_adds_wait() {
        let now = Instant::now();
        let due = now + Duration::from_millis(300);
        assert_eq!(spacing_left(Some(due), false, now), Duration::from_millis(300), "a large pool's churn is spaced");
        assert_eq!(spacing_left(Some(due), true, now), Duration::ZERO, "the queue is served at once");
        assert_eq!(spacing_left(Some(now), false, now + Duration::from_millis(5)), Duration::ZERO, "a pass past due");
        assert_eq!(spacing_left(None, false, now), Duration::ZERO, "a term's first pass");
    }

    #[test]
    fn an_event_after_a_quiet_spell_is_acted_on_at_once_and_a_burst_is_coalesced() {
        assert_eq!(coalesce_before_pass(Duration::from_secs(5)), Duration::ZERO, "a lone release waits for nothing");
        assert_eq!(coalesce_before_pass(BURST), Duration::ZERO);
        assert_eq!(coalesce_before_pass(Duration::from_millis(3)), COALESCE, "events right after a pass are a burst");
        assert_eq!(coalesce_before_pass(BURST - Duration::from_millis(1)), COALESCE);
    }
}
