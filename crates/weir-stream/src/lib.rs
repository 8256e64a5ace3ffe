//! Weir's streaming engine: the change data model (Z-sets of Arrow rows),
//! incremental operators, and the dataflow that runs a view's operators
//! epoch by epoch.
//!
//! An operator is a state machine: it takes a batch of [`Changes`] on an
//! input port and returns the changes of its output. Its durable state is a
//! set of [`Multiset`]s whose per-epoch deltas are checkpointed with the
//! epoch that produced them. Nothing here knows about sessions, SQL text or
//! the object store.
//!
//! | module | operator |
//! |---|---|
//! | `map` | `Filter`, `Project`, `Values`, `Rename` (sources and `UNION ALL`): stateless |
//! | `aggregate` | `Aggregate`: recomputes each changed group |
//! | `running` | `RunningAggregate`: `count`/`sum`/`avg` as retractable totals |
//! | `join` | `Join`: every join type, by the delta rule or per changed key |
//! | `top_n` | `TopN`: `ORDER BY ... LIMIT ... OFFSET` |
//!
//! [`Dataflow`] instantiates a [`StreamPlan`] and pushes changes through
//! it; [`Aligner`] is the barrier alignment of a task with several inputs.

mod aggregate;
mod align;
mod changes;
mod dataflow;
mod join;
mod map;
mod multiset;
mod operator;
mod plan;
mod running;
mod top_n;

#[cfg(test)]
mod testing;

pub use align::{Aligner, BarrierMismatch};
pub use changes::Changes;
pub use dataflow::Dataflow;
pub use multiset::Multiset;
pub use operator::Operator;
pub use plan::{AggregateSpec, JoinSpec, NodeKind, NodeSpec, StreamPlan, TopNSpec};

/// Errors of the streaming engine are DataFusion's: expressions fail with
/// them, and the server already maps them to SQLSTATEs.
pub type Result<T> = datafusion::error::Result<T>;
