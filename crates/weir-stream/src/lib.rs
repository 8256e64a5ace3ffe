//! Weir's streaming engine: the change data model (Z-sets of Arrow rows),
//! incremental operators, and the dataflow that runs a view's operators
//! epoch by epoch.
//!
//! An operator is a state machine: it takes a batch of [`Changes`] on an
//! input port and returns the changes of its output, now or when the epoch
//! ends. Its state is columnar (Arrow arrays and vectors indexed by key
//! id) and it hands the state's delta to each checkpoint as Arrow batches.
//! Nothing here knows about sessions, SQL text or the object store.
//!
//! | module | operator | state |
//! |---|---|---|
//! | `map` | `Filter`, `Project`, `Values`, `Rename` (sources and `UNION ALL`) | none |
//! | `aggregate` | `GroupedAggregate` (`count`, `sum`, `avg`, `min`, `max`), `RecomputeAggregate` (any other) | columns per group; input rows by group |
//! | `join` | `Join`: every join type, by the delta rule or per changed key | each side's rows by join key ([`KeyedRows`]) |
//! | `top_n` | `TopN`: `ORDER BY ... LIMIT ... OFFSET` | input rows in order |
//! | `window_function` | `RecomputeWindow`: `OVER` functions, each touched partition recomputed (`recompute`) | input rows by partition |
//! | `group_top_n` | `GroupTopN`: `ROW_NUMBER() OVER (PARTITION BY ...) <= n` | each partition's rows in order |
//! | `append_top_n` | `AppendOnlyTopN`: the same for `n <= 16` over an input that only inserts | each partition's first rows, in slots |
//! | `watermark` | `WatermarkFilter`: drops late rows, notes event time | the watermark, per instance |
//! | `temporal_filter` | `TemporalFilter`: `WHERE ts > now() - INTERVAL ...` as the epoch clock moves | rows in or to come, by their times |
//!
//! [`Dataflow`] instantiates a [`StreamPlan`] and pushes changes through
//! it; [`Aligner`] is the barrier alignment of a task with several inputs;
//! [`runtime`] runs every view's dataflow with the source readers that feed
//! it, cuts their state at barriers, and defines the [`runtime::Source`]
//! trait that connectors implement.

mod aggregate;
mod align;
mod append_top_n;
mod changes;
mod dataflow;
mod fixed_intervals;
mod group_top_n;
mod join;
mod join_window;
mod keyed_rows;
mod map;
mod operator;
mod ordered_rows;
mod partition;
mod plan;
mod proctime;
mod recompute;
pub mod runtime;
pub mod session;
mod temporal_filter;
mod top_n;
pub mod watermark;
mod window_close;
mod window_function;

#[cfg(test)]
mod testing;

pub use aggregate::GroupedAggregate;
pub use align::{Aligner, BarrierMismatch};
pub use changes::Changes;
pub use dataflow::{Dataflow, OperatorInfo, OperatorStats};
pub use keyed_rows::KeyedRows;
pub use operator::Operator;
pub use partition::{vnodes, Placement, VNODES};
pub use plan::{
    AggregateSpec, Exchange, GroupTopNSpec, JoinSpec, NodeKind, NodeSpec, SessionSpec, StreamPlan,
    TemporalBound, TopNSpec, WindowSpec,
};

/// Errors of the streaming engine are DataFusion's: expressions fail with
/// them, and the server already maps them to SQLSTATEs.
pub type Result<T> = datafusion::error::Result<T>;
