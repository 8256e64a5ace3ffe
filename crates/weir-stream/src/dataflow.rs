//! [`Dataflow`]: one view's operators, chained.
//!
//! [`Dataflow::push`] hands a relation's changes to the source nodes that
//! read it; each operator's output goes straight on to the operators that
//! consume it, and the changes that reach the last node are the view's.
//! [`Dataflow::flush`] ends an epoch: operators flush in topological
//! order, so what an aggregate held back reaches the operators above it
//! before they flush in turn. The caller (the stream worker) decides which
//! changes belong to which epoch: it aligns barriers across its inputs,
//! flushes, then takes [`Dataflow::checkpoint`], so the operators' state
//! deltas are exactly those of the epoch.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::error::DataFusionError;
use weir_state::{DeltaBatches, TableSpec};

use crate::append_top_n::{self, AppendOnlyTopN};
use crate::fixed_intervals::fixed_interval_arithmetic;
use crate::group_top_n::GroupTopN;
use crate::join::Join;
use crate::join_window::{interval_join, joined_schema, window_join, JoinExpiry};
use crate::map::{Filter, Project, Rename, Unnest, Values};
use crate::plan::{JoinSpec, NodeKind, StreamPlan, WindowSpec};
use crate::proctime::ProcTime;
use crate::session::SessionExpiry;
use crate::temporal_filter::TemporalFilter;
use crate::top_n::TopN;
use crate::watermark::{ColumnBound, WatermarkFilter, Watermarks};
use crate::window_function::RecomputeWindow;
use crate::{Changes, Operator, Result};

/// What one operator has done since the dataflow started.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct OperatorStats {
    /// Change rows it received.
    pub rows_in: u64,
    /// Change rows it emitted.
    pub rows_out: u64,
    /// Time spent in it.
    pub busy: Duration,
}

/// One operator of a running dataflow, as reported by
/// [`Dataflow::operators`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct OperatorInfo {
    /// The node's position in the plan.
    pub index: usize,
    /// Its one-line description (as in `EXPLAIN`).
    pub name: String,
    /// What it has done.
    pub stats: OperatorStats,
    /// Rows (groups, entries) each of its state tables holds.
    pub state_rows: Vec<usize>,
    /// Bytes its state and held-back output take.
    pub state_bytes: usize,
    /// How many instances run it: the workers of a partitioned view, 1
    /// otherwise.
    pub instances: usize,
    /// Rows it dropped as late since the view was created.
    #[serde(default)]
    pub late_rows: u64,
    /// A watermark node's watermark in force, in Unix microseconds.
    #[serde(default)]
    pub watermark_micros: Option<i64>,
}

#[derive(Debug)]
struct Node {
    operator: Box<dyn Operator>,
    /// The nodes its output feeds, with the port.
    consumers: Vec<(usize, usize)>,
    /// The relation feeding a source node.
    relation: Option<String>,
    name: String,
    stats: OperatorStats,
}

/// `join` with its residual condition's fixed intervals added as
/// durations (see [`crate::fixed_intervals`]).
fn join_with_fixed_intervals(join: &JoinSpec, left: &Schema, right: &Schema) -> Result<JoinSpec> {
    let mut join = join.clone();
    if let Some(filter) = &join.filter {
        join.filter = Some(fixed_interval_arithmetic(
            filter,
            &joined_schema(left, right),
        )?);
    }
    Ok(join)
}

/// The operator of node `index` of `plan`, with empty state.
pub(crate) fn instantiate(plan: &StreamPlan, index: usize) -> Result<Box<dyn Operator>> {
    let spec = &plan.nodes[index];
    let input_schema = |port: usize| plan.nodes[spec.inputs[port]].schema.clone();
    let append_only = |port: usize| plan.input_append_only(index, port);
    let schema = spec.schema.clone();
    let operator: Box<dyn Operator> = match &spec.kind {
        NodeKind::Source { .. } | NodeKind::Union => Box::new(Rename::new(schema)),
        NodeKind::Watermark { column, .. } => Box::new(WatermarkFilter::new(
            index,
            *column,
            input_schema(0).field(*column).data_type(),
        )),
        NodeKind::Values { rows } => Box::new(Values::new(rows.clone())),
        NodeKind::ProcTime if !append_only(0) => {
            return Err(DataFusionError::NotImplemented(
                "PROCTIME() over an input that updates or deletes rows: a deleted row \
                 could not get the time it was inserted with"
                    .into(),
            ))
        }
        NodeKind::ProcTime => Box::new(ProcTime::new(index, schema)),
        NodeKind::Filter { predicate } => Box::new(Filter::new(fixed_interval_arithmetic(
            predicate,
            &input_schema(0),
        )?)),
        NodeKind::TemporalFilter { bounds } => {
            Box::new(TemporalFilter::new(index, bounds.clone(), input_schema(0))?)
        }
        NodeKind::Project { exprs } => {
            let input = input_schema(0);
            let exprs = exprs
                .iter()
                .map(|expr| fixed_interval_arithmetic(expr, &input))
                .collect::<Result<Vec<_>>>()?;
            Box::new(Project::new(exprs, schema))
        }
        NodeKind::Unnest {
            column,
            keep_null,
            keep_empty,
        } => Box::new(Unnest::new(*column, *keep_null, *keep_empty, schema)),
        NodeKind::Aggregate(agg) => crate::aggregate::aggregate(
            agg.clone(),
            input_schema(0),
            schema,
            append_only(0),
            window_of(plan, index),
        )?,
        NodeKind::Join(join) => Box::new(
            Join::new(
                join_with_fixed_intervals(join, &input_schema(0), &input_schema(1))?,
                input_schema(0),
                input_schema(1),
                schema,
                [append_only(0), append_only(1)],
            )?
            .with_expiry(join_expiry_of(plan, index))?,
        ),
        NodeKind::TopN(top) => Box::new(TopN::new(top, input_schema(0))?),
        NodeKind::Window(window) => Box::new(RecomputeWindow::new(
            window.clone(),
            input_schema(0),
            schema,
            append_only(0),
            session_expiry_of(plan, index),
        )?),
        NodeKind::GroupTopN(top)
            if append_top_n::applies(top, append_only(0), input_schema(0).fields().len()) =>
        {
            Box::new(
                AppendOnlyTopN::new(top, input_schema(0), schema)?
                    .with_window(partition_window_of(plan, index)),
            )
        }
        NodeKind::GroupTopN(top) => Box::new(
            GroupTopN::new(top, input_schema(0), schema, append_only(0))?
                .with_window(partition_window_of(plan, index)),
        ),
    };
    let declared = plan.state_tables(index).len();
    if operator.state_specs().len() != declared {
        return Err(DataFusionError::Internal(format!(
            "operator {} keeps {} state tables, its plan node declares {declared}",
            plan.describe(index),
            operator.state_specs().len()
        )));
    }
    Ok(operator)
}

/// The first group column of aggregate node `index` with a bound (see
/// [`crate::watermark::ColumnBound`]): the aggregate's window.
pub(crate) fn window_of(plan: &StreamPlan, index: usize) -> Option<(usize, ColumnBound)> {
    let NodeKind::Aggregate(spec) = &plan.nodes[index].kind else {
        return None;
    };
    let bounds = plan.column_bounds().swap_remove(index);
    bounds
        .into_iter()
        .take(spec.group.len())
        .enumerate()
        .find_map(|(i, b)| b.map(|b| (i, b)))
}

/// The first `PARTITION BY` value of top-N node `index` that a
/// watermark bounds: the top-N's window.
pub(crate) fn partition_window_of(plan: &StreamPlan, index: usize) -> Option<(usize, ColumnBound)> {
    let NodeKind::GroupTopN(spec) = &plan.nodes[index].kind else {
        return None;
    };
    let input = plan
        .column_bounds()
        .swap_remove(plan.nodes[index].inputs[0]);
    spec.partition
        .iter()
        .enumerate()
        .find_map(|(i, expr)| ColumnBound::through(expr, &input).map(|b| (i, b)))
}

/// How `OVER` node `index` forgets final sessions: when its functions
/// are session functions over a time column a watermark bounds.
pub(crate) fn session_expiry_of(plan: &StreamPlan, index: usize) -> Option<SessionExpiry> {
    let NodeKind::Window(WindowSpec {
        session: Some(session),
        ..
    }) = &plan.nodes[index].kind
    else {
        return None;
    };
    let input = plan.nodes[index].inputs[0];
    let bound = plan
        .column_bounds()
        .swap_remove(input)
        .get(session.time)?
        .clone()?;
    Some(SessionExpiry::new(session.time, session.gap, bound))
}

/// What join node `index` can forget as the watermark moves (see
/// [`crate::join_window`]): a window join on its first key that pairs two
/// bounded columns, or else an interval join in its condition.
pub(crate) fn join_expiry_of(plan: &StreamPlan, index: usize) -> Option<JoinExpiry> {
    let NodeKind::Join(spec) = &plan.nodes[index].kind else {
        return None;
    };
    let node = &plan.nodes[index];
    let bounds = plan.column_bounds();
    let (left, right) = (&bounds[node.inputs[0]], &bounds[node.inputs[1]]);
    let window = spec
        .left_keys
        .iter()
        .zip(&spec.right_keys)
        .find_map(|(l, r)| {
            let bounds = [
                ColumnBound::through(l, left)?,
                ColumnBound::through(r, right)?,
            ];
            Some(window_join(l.clone(), r.clone(), bounds))
        });
    window.or_else(|| {
        let (left_schema, right_schema) = (
            &plan.nodes[node.inputs[0]].schema,
            &plan.nodes[node.inputs[1]].schema,
        );
        let mut left = left.clone();
        let mut right = right.clone();
        left.resize(left_schema.fields().len(), None);
        right.resize(right_schema.fields().len(), None);
        let joined = joined_schema(left_schema, right_schema);
        interval_join(spec, &joined, &left, &right)
    })
}

/// An aggregate node run in two phases (see [`crate::aggregate::two_phase`]).
pub(crate) struct TwoPhase {
    /// Runs in every instance on the rows it has.
    pub local: Box<dyn Operator>,
    /// How the local phase's partials reach the final one.
    pub exchange: crate::Exchange,
    /// Owns the node's state; takes the place of [`instantiate`]'s
    /// operator.
    pub merge: Box<dyn Operator>,
}

/// Node `index` in two phases, if it is an aggregate that can run so.
pub(crate) fn two_phase(plan: &StreamPlan, index: usize) -> Result<Option<TwoPhase>> {
    let spec = &plan.nodes[index];
    let NodeKind::Aggregate(agg) = &spec.kind else {
        return Ok(None);
    };
    let phases = crate::aggregate::two_phase(
        agg.clone(),
        plan.nodes[spec.inputs[0]].schema.clone(),
        spec.schema.clone(),
        plan.input_append_only(index, 0),
        window_of(plan, index),
    )?;
    Ok(phases.map(|(local, merge)| TwoPhase {
        exchange: local.exchange(),
        local: Box::new(local),
        merge: Box::new(merge),
    }))
}

/// A view's running operators.
#[derive(Debug)]
pub struct Dataflow {
    nodes: Vec<Node>,
}

impl Dataflow {
    /// Instantiates the operators of `plan`, with empty state.
    pub fn new(plan: &StreamPlan) -> Result<Self> {
        let mut nodes: Vec<Node> = Vec::with_capacity(plan.nodes.len());
        for (index, spec) in plan.nodes.iter().enumerate() {
            let operator = instantiate(plan, index)?;
            let relation = match &spec.kind {
                NodeKind::Source { relation, .. } => Some(relation.clone()),
                _ => None,
            };
            for (port, &input) in spec.inputs.iter().enumerate() {
                nodes[input].consumers.push((index, port));
            }
            nodes.push(Node {
                operator,
                consumers: Vec::new(),
                relation,
                name: plan.describe(index),
                stats: OperatorStats::default(),
            });
        }
        Ok(Dataflow { nodes })
    }

    /// Names of the relations the dataflow reads.
    pub fn sources(&self) -> BTreeSet<String> {
        self.nodes
            .iter()
            .filter_map(|n| n.relation.clone())
            .collect()
    }

    /// The output that exists before any input: run once when the view is
    /// created. Operators that hold output back give it at the next
    /// [`Dataflow::flush`].
    pub fn initial(&mut self) -> Result<Vec<Changes>> {
        let mut out = Vec::new();
        for index in 0..self.nodes.len() {
            let started = Instant::now();
            let parts = self.nodes[index].operator.initial()?;
            self.nodes[index].stats.busy += started.elapsed();
            for part in parts {
                self.emit(index, part, &mut out)?;
            }
        }
        Ok(out)
    }

    /// Feeds `changes` of `relation` to the operators that read it;
    /// returns the view's output changes.
    pub fn push(&mut self, relation: &str, changes: Changes) -> Result<Vec<Changes>> {
        let mut out = Vec::new();
        if changes.is_empty() {
            return Ok(out);
        }
        let readers: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].relation.as_deref() == Some(relation))
            .collect();
        for index in readers {
            self.deliver(index, 0, changes.clone(), &mut out)?;
        }
        Ok(out)
    }

    /// Ends the epoch: every operator flushes, in topological order;
    /// returns the view's output changes.
    pub fn flush(&mut self) -> Result<Vec<Changes>> {
        self.flush_with(&Watermarks::new())
    }

    /// Ends the epoch like [`Dataflow::flush`], then puts `watermarks`
    /// in force in each operator after it flushed (see
    /// [`Operator::advance`]).
    pub fn flush_with(&mut self, watermarks: &Watermarks) -> Result<Vec<Changes>> {
        let mut out = Vec::new();
        for index in 0..self.nodes.len() {
            let started = Instant::now();
            let operator = &mut self.nodes[index].operator;
            let mut parts = operator.flush()?;
            parts.extend(operator.advance(watermarks)?);
            self.nodes[index].stats.busy += started.elapsed();
            for part in parts {
                self.emit(index, part, &mut out)?;
            }
        }
        Ok(out)
    }

    fn deliver(
        &mut self,
        index: usize,
        port: usize,
        changes: Changes,
        out: &mut Vec<Changes>,
    ) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let node = &mut self.nodes[index];
        node.stats.rows_in += changes.len() as u64;
        let started = Instant::now();
        let parts = node.operator.process(port, changes)?;
        node.stats.busy += started.elapsed();
        for part in parts {
            self.emit(index, part, out)?;
        }
        Ok(())
    }

    /// Sends a node's output on: to its consumers, or out of the view.
    fn emit(&mut self, index: usize, changes: Changes, out: &mut Vec<Changes>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        self.nodes[index].stats.rows_out += changes.len() as u64;
        let consumers = self.nodes[index].consumers.clone();
        if consumers.is_empty() {
            out.push(changes);
            return Ok(());
        }
        for (consumer, port) in consumers {
            self.deliver(consumer, port, changes.clone(), out)?;
        }
        Ok(())
    }

    /// The shapes of every operator's state tables, in a fixed order (the
    /// order state tables are assigned ids in).
    pub fn state_specs(&self) -> Vec<TableSpec> {
        self.nodes
            .iter()
            .flat_map(|n| n.operator.state_specs())
            .collect()
    }

    /// Every state table's changes since the last checkpoint, in
    /// [`Dataflow::state_specs`] order. Call after [`Dataflow::flush`].
    pub fn checkpoint(&mut self) -> Result<Vec<Option<DeltaBatches>>> {
        let mut deltas = Vec::new();
        for node in &mut self.nodes {
            let declared = node.operator.state_specs().len();
            let taken = node.operator.checkpoint()?;
            if taken.len() != declared {
                return Err(DataFusionError::Internal(format!(
                    "operator {} checkpointed {} of its {declared} state tables",
                    node.name,
                    taken.len()
                )));
            }
            deltas.extend(taken);
        }
        Ok(deltas)
    }

    /// Loads every state table's rows (recovery), in
    /// [`Dataflow::state_specs`] order.
    pub fn restore(&mut self, tables: Vec<RecordBatch>) -> Result<()> {
        let mut tables = tables.into_iter();
        for node in &mut self.nodes {
            let count = node.operator.state_specs().len();
            let mine: Vec<RecordBatch> = tables.by_ref().take(count).collect();
            node.operator.restore(&mine)?;
        }
        if tables.next().is_some() {
            return Err(DataFusionError::Internal(
                "more state tables restored than the dataflow declares".into(),
            ));
        }
        let watermarks = self.watermarks();
        for node in &mut self.nodes {
            node.operator.advance(&watermarks)?;
        }
        Ok(())
    }

    /// The watermarks its watermark nodes have in force.
    pub fn watermarks(&self) -> Watermarks {
        self.nodes
            .iter()
            .filter_map(|n| n.operator.watermark())
            .collect()
    }

    /// Each watermark node's greatest event time read since the last
    /// call, for those that read any.
    pub fn take_event_times(&mut self) -> Vec<(usize, i64)> {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.operator.take_event_time())
            .collect()
    }

    /// Bytes every operator holds.
    pub fn memory_size(&self) -> usize {
        self.nodes.iter().map(|n| n.operator.memory_size()).sum()
    }

    /// What each operator has done and holds, in plan order.
    pub fn operators(&self) -> Vec<OperatorInfo> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, n)| OperatorInfo {
                index,
                name: n.name.clone(),
                stats: n.stats.clone(),
                state_rows: n.operator.state_rows(),
                state_bytes: n.operator.memory_size(),
                instances: 1,
                late_rows: n.operator.late_rows(),
                watermark_micros: n.operator.watermark_micros(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::plan::{JoinSpec, NodeSpec};
    use crate::testing::{kv, kv_schema, net, rows};
    use datafusion::arrow::datatypes::Schema;
    use datafusion::common::JoinType;
    use datafusion::physical_expr::expressions::col;

    fn plan() -> StreamPlan {
        let schema = kv_schema();
        let source = |relation: &str| NodeSpec {
            kind: NodeKind::Source {
                relation: relation.into(),
                read: None,
            },
            inputs: vec![],
            schema: schema.clone(),
            append_only: false,
            key: None,
        };
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        fields.extend(schema.fields().iter().cloned());
        let join = NodeSpec {
            kind: NodeKind::Join(JoinSpec {
                join_type: JoinType::Full,
                left_keys: vec![col("k", &schema).unwrap()],
                right_keys: vec![col("k", &schema).unwrap()],
                filter: None,
                nulls_equal: false,
                null_aware: false,
                temporal: false,
            }),
            inputs: vec![0, 1],
            schema: Arc::new(Schema::new(fields)),
            append_only: false,
            key: None,
        };
        StreamPlan {
            nodes: vec![source("l"), source("r"), join],
        }
    }

    fn step(flow: &mut Dataflow, l: Changes, r: Changes) -> Vec<Changes> {
        let mut out = flow.push("l", l).unwrap();
        out.extend(flow.push("r", r).unwrap());
        out.extend(flow.flush().unwrap());
        out
    }

    #[test]
    fn changes_reach_every_source_and_restored_state_behaves_the_same() {
        let mut flow = Dataflow::new(&plan()).unwrap();
        assert_eq!(flow.sources().len(), 2);
        let out = step(
            &mut flow,
            kv(&[(Some(1), Some(10), 1)]),
            kv(&[(Some(2), Some(20), 1)]),
        );
        assert_eq!(
            net(&out),
            rows(&[("1,10,NULL,NULL", 1), ("NULL,NULL,2,20", 1)])
        );

        // Checkpoint: every state's delta; recovery: a new dataflow loads
        // them through state tables, as a restart does.
        let specs = flow.state_specs();
        let deltas = flow.checkpoint().unwrap();
        let tables: Vec<RecordBatch> = specs
            .into_iter()
            .zip(deltas)
            .map(|(spec, delta)| {
                let mut table = weir_state::StateTable::new(spec).unwrap();
                let delta = delta.expect("both sides changed");
                table
                    .apply_delta(delta.upserts.as_ref(), delta.deletes.as_ref())
                    .unwrap();
                table.snapshot().stored_rows().unwrap()
            })
            .collect();
        let mut copy = Dataflow::new(&plan()).unwrap();
        copy.restore(tables).unwrap();
        let (l, r) = (kv(&[(Some(2), Some(21), 1)]), kv(&[(Some(1), Some(11), 1)]));
        let a = step(&mut flow, l.clone(), r.clone());
        let b = step(&mut copy, l, r);
        assert_eq!(net(&a), net(&b));
        assert_eq!(
            net(&a),
            rows(&[
                ("1,10,1,11", 1),
                ("1,10,NULL,NULL", -1),
                ("2,21,2,20", 1),
                ("NULL,NULL,2,20", -1)
            ])
        );
        let stats = flow.operators();
        assert_eq!(stats[2].stats.rows_in, 4);
        assert_eq!(stats[2].state_rows, vec![2, 2]);
    }
}
