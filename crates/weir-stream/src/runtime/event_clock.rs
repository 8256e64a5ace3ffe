//! A view's watermarks and `now()`, as the coordinator works them out:
//! every
//! instance of a watermark node reports the greatest event time it read
//! in each epoch; the watermark is the least of the instances' greatest
//! times, minus the node's delay, and never goes back. The next barrier
//! carries it to every instance (see [`crate::watermark`]).
//!
//! An instance that has read nothing for the idle timeout (and one that
//! has read nothing since the view started, once the timeout passed) is
//! idle: it holds back no watermark until it reads again. Without that,
//! one quiet split would stop every window from closing. But an instance
//! whose readers had rows waiting at a barrier (starting, catching up,
//! held back by a slow worker or a shared reader, see
//! `SourceReader::has_rows_waiting`) is behind, not idle, however long
//! it reads nothing: the rows it has yet to read may be older than the
//! others', and windows closed without them would miss them.
//!
//! A view's temporal filters get the epoch's `now()` the same way, under
//! their node indexes: the time the coordinator sent the epoch's barrier
//! (see `crate::temporal_filter`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::watermark::Watermarks;
use crate::StreamPlan;

/// One instance of a watermark node.
#[derive(Debug)]
struct Instance {
    /// The greatest event time it read.
    greatest: Option<i64>,
    /// When it last read a row or was behind (or when the view started).
    last_active: Instant,
}

/// One watermark node's instances and watermark.
#[derive(Debug)]
struct NodeClock {
    delay: i64,
    instances: Vec<Instance>,
    watermark: Option<i64>,
}

/// The watermarks of one view (see the module documentation).
#[derive(Debug)]
pub(super) struct EventClock {
    nodes: BTreeMap<usize, NodeClock>,
    idle_timeout: Duration,
    /// The temporal filter nodes.
    temporal: Vec<usize>,
    /// The `now()` of the epoch whose barrier went last, in Unix
    /// microseconds.
    now: Option<i64>,
}

impl EventClock {
    /// The clock of a view running `plan`; `instances_of(relation)`: how
    /// many instances of a watermark node over `relation` read rows.
    pub fn new(
        plan: &StreamPlan,
        instances_of: impl Fn(&str) -> usize,
        idle_timeout: Duration,
    ) -> Self {
        let now = Instant::now();
        let nodes = plan
            .watermark_nodes()
            .into_iter()
            .map(|(node, delay, relation)| {
                let instances = (0..instances_of(&relation).max(1))
                    .map(|_| Instance {
                        greatest: None,
                        last_active: now,
                    })
                    .collect();
                let clock = NodeClock {
                    delay,
                    instances,
                    watermark: None,
                };
                (node, clock)
            })
            .collect();
        EventClock {
            nodes,
            idle_timeout,
            temporal: plan.now_nodes(),
            now: None,
        }
    }

    /// The barrier of an epoch whose `now()` is `now` went out.
    pub fn set_now(&mut self, now: i64) {
        self.now = Some(self.now.map_or(now, |n| n.max(now)));
    }

    /// Whether the view's rows depend on `now()`: every epoch may change
    /// them, even without input.
    pub fn follows_now(&self) -> bool {
        !self.temporal.is_empty()
    }

    /// Instance `instance` of node `node` read rows up to event time
    /// `time` in the epoch just cut.
    pub fn report(&mut self, instance: usize, node: usize, time: i64) {
        let Some(clock) = self.nodes.get_mut(&node) else {
            return;
        };
        if let Some(slot) = clock.instances.get_mut(instance) {
            slot.greatest = Some(slot.greatest.map_or(time, |g| g.max(time)));
            slot.last_active = Instant::now();
        }
    }

    /// Instance `instance` had rows waiting at the barrier of the epoch
    /// just cut: it is not idle.
    pub fn behind(&mut self, instance: usize) {
        for clock in self.nodes.values_mut() {
            if let Some(slot) = clock.instances.get_mut(instance) {
                slot.last_active = Instant::now();
            }
        }
    }

    /// Works the watermarks out again; returns whether any moved.
    pub fn tick(&mut self) -> bool {
        let now = Instant::now();
        let mut moved = false;
        for clock in self.nodes.values_mut() {
            let active: Vec<Option<i64>> = clock
                .instances
                .iter()
                .filter(|i| now.duration_since(i.last_active) < self.idle_timeout)
                .map(|i| i.greatest)
                .collect();
            // No active instance: nothing moves it. An active one that
            // has read nothing holds it back.
            let Some(Some(least)) = active
                .into_iter()
                .reduce(|a, b| a.zip(b).map(|(a, b)| a.min(b)))
            else {
                continue;
            };
            let candidate = least.saturating_sub(clock.delay);
            if clock.watermark.is_none_or(|w| candidate > w) {
                clock.watermark = Some(candidate);
                moved = true;
            }
        }
        moved
    }

    /// The watermarks worked out so far.
    pub fn watermarks(&self) -> Watermarks {
        let now = self
            .now
            .into_iter()
            .flat_map(|now| self.temporal.iter().map(move |&node| (node, now)));
        self.nodes
            .iter()
            .filter_map(|(&node, clock)| clock.watermark.map(|w| (node, w)))
            .chain(now)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(instances: usize, idle: Duration) -> EventClock {
        let node = NodeClock {
            delay: 10,
            instances: (0..instances)
                .map(|_| Instance {
                    greatest: None,
                    last_active: Instant::now(),
                })
                .collect(),
            watermark: None,
        };
        EventClock {
            nodes: BTreeMap::from([(1, node)]),
            idle_timeout: idle,
            temporal: Vec::new(),
            now: None,
        }
    }

    #[test]
    fn the_watermark_is_the_least_instance_minus_the_delay_and_never_goes_back() {
        let mut clock = clock(2, Duration::from_secs(3600));
        clock.report(0, 1, 100);
        // Instance 1 has read nothing yet: it holds the watermark back.
        assert!(!clock.tick());
        assert!(clock.watermarks().is_empty());
        clock.report(1, 1, 50);
        assert!(clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 40)]));
        clock.report(1, 1, 30);
        assert!(!clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 40)]));
        clock.report(1, 1, 120);
        assert!(clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 90)]));
    }

    #[test]
    fn an_idle_instance_holds_nothing_back() {
        let mut clock = clock(2, Duration::ZERO);
        clock.report(0, 1, 100);
        // Every instance is idle at once with a zero timeout: nothing to
        // take the least of, and the watermark stays.
        assert!(!clock.tick());
        clock.idle_timeout = Duration::from_secs(3600);
        clock.nodes.get_mut(&1).unwrap().instances[1].last_active =
            Instant::now() - Duration::from_secs(7200);
        assert!(clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 90)]));
    }

    #[test]
    fn an_instance_that_is_behind_holds_the_watermark_back_while_it_reads_nothing() {
        let mut clock = clock(2, Duration::from_secs(3600));
        clock.report(0, 1, 100);
        clock.report(1, 1, 50);
        assert!(clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 40)]));
        // Instance 1 reads nothing for longer than the timeout ...
        let long_ago = Instant::now() - Duration::from_secs(7200);
        clock.nodes.get_mut(&1).unwrap().instances[1].last_active = long_ago;
        // ... but its reader had rows waiting at the barrier: instance 0's
        // newer rows do not move the watermark past instance 1's.
        clock.behind(1);
        clock.report(0, 1, 200);
        assert!(!clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 40)]));
        // Idle once more (nothing waiting), it holds nothing back.
        clock.nodes.get_mut(&1).unwrap().instances[1].last_active = long_ago;
        assert!(clock.tick());
        assert_eq!(clock.watermarks(), Watermarks::from([(1, 190)]));
    }
}
