//! [`Dataflow`]: one view's operators, chained.
//!
//! [`Dataflow::step`] pushes a batch of changes (one or more relations')
//! through the operators in topological order. The caller (the server's
//! stream worker) decides which changes belong to which epoch: it aligns
//! barriers across its inputs before taking [`Dataflow::state`], so the
//! operators' state deltas are exactly those of the epoch.

use std::collections::BTreeSet;

use datafusion::arrow::datatypes::SchemaRef;

use crate::aggregate::Aggregate;
use crate::join::Join;
use crate::map::{Filter, Project, Rename, Values};
use crate::plan::{NodeKind, StreamPlan};
use crate::running::{is_running, RunningAggregate};
use crate::top_n::TopN;
use crate::{Changes, Multiset, Operator, Result};

#[derive(Debug)]
struct Node {
    operator: Box<dyn Operator>,
    inputs: Vec<usize>,
    schema: SchemaRef,
    /// The relation feeding a source node.
    relation: Option<String>,
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
        for spec in &plan.nodes {
            let input_schema = |port: usize| nodes[spec.inputs[port]].schema.clone();
            let schema = spec.schema.clone();
            let operator: Box<dyn Operator> = match &spec.kind {
                NodeKind::Source { .. } | NodeKind::Union => Box::new(Rename::new(schema.clone())),
                NodeKind::Values { rows } => Box::new(Values::new(rows.clone())),
                NodeKind::Filter { predicate } => Box::new(Filter::new(predicate.clone())),
                NodeKind::Project { exprs } => {
                    Box::new(Project::new(exprs.clone(), schema.clone()))
                }
                NodeKind::Aggregate(agg) if is_running(agg) => Box::new(RunningAggregate::new(
                    agg.clone(),
                    input_schema(0),
                    schema.clone(),
                )?),
                NodeKind::Aggregate(agg) => Box::new(Aggregate::new(
                    agg.clone(),
                    input_schema(0),
                    schema.clone(),
                )?),
                NodeKind::Join(join) => Box::new(Join::new(
                    join.clone(),
                    input_schema(0),
                    input_schema(1),
                    schema.clone(),
                )?),
                NodeKind::TopN(top) => Box::new(TopN::new(top, input_schema(0))?),
            };
            let relation = match &spec.kind {
                NodeKind::Source { relation } => Some(relation.clone()),
                _ => None,
            };
            nodes.push(Node {
                operator,
                inputs: spec.inputs.clone(),
                schema,
                relation,
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
    /// created.
    pub fn initial(&mut self) -> Result<Vec<Changes>> {
        self.run(|_, operator| operator.initial())
    }

    /// Pushes one epoch's changes through the operators; `changes_of`
    /// gives a relation's changes in the epoch. Returns the changes of the
    /// view's output.
    pub fn step(&mut self, changes_of: &dyn Fn(&str) -> Vec<Changes>) -> Result<Vec<Changes>> {
        self.run(|relation, operator| match relation {
            Some(relation) => {
                let mut out = Vec::new();
                for changes in changes_of(relation) {
                    if !changes.is_empty() {
                        out.extend(operator.process(0, changes)?);
                    }
                }
                Ok(out)
            }
            None => Ok(Vec::new()),
        })
    }

    /// Runs every node in order: `seed` gives a node its own output (from its
    /// relation, if it is a source), then its inputs' outputs go through it.
    fn run(
        &mut self,
        mut seed: impl FnMut(Option<&str>, &mut dyn Operator) -> Result<Vec<Changes>>,
    ) -> Result<Vec<Changes>> {
        let mut outputs: Vec<Vec<Changes>> = Vec::with_capacity(self.nodes.len());
        for node in self.nodes.iter_mut() {
            let mut out = seed(node.relation.as_deref(), node.operator.as_mut())?;
            for (port, &input) in node.inputs.iter().enumerate() {
                let parts: Vec<Changes> = outputs[input]
                    .iter()
                    .filter(|c| !c.is_empty())
                    .cloned()
                    .collect();
                if parts.is_empty() {
                    continue;
                }
                let schema = parts[0].schema();
                let merged = Changes::concat(&schema, &parts)?;
                out.extend(node.operator.process(port, merged)?);
            }
            out.retain(|c| !c.is_empty());
            outputs.push(out);
        }
        Ok(outputs.pop().unwrap_or_default())
    }

    /// Lets every operator rebuild what it derives from its state, once
    /// recovery has loaded it.
    pub fn restored(&mut self) -> Result<()> {
        self.nodes
            .iter_mut()
            .try_for_each(|n| n.operator.restored())
    }

    /// Every operator's durable state, up to date, in a fixed order (the
    /// order state tables are assigned ids in).
    pub fn state(&mut self) -> Result<Vec<&mut Multiset>> {
        for node in self.nodes.iter_mut() {
            node.operator.sync_state()?;
        }
        Ok(self
            .nodes
            .iter_mut()
            .flat_map(|n| n.operator.state())
            .collect())
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
            },
            inputs: vec![],
            schema: schema.clone(),
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
            }),
            inputs: vec![0, 1],
            schema: Arc::new(Schema::new(fields)),
        };
        StreamPlan {
            nodes: vec![source("l"), source("r"), join],
        }
    }

    fn changes_of<'a>(l: &'a Changes, r: &'a Changes) -> impl Fn(&str) -> Vec<Changes> + 'a {
        move |relation| match relation {
            "l" => vec![l.clone()],
            "r" => vec![r.clone()],
            _ => vec![],
        }
    }

    #[test]
    fn one_step_feeds_every_source_and_restored_state_behaves_the_same() {
        let mut flow = Dataflow::new(&plan()).unwrap();
        assert_eq!(flow.sources().len(), 2);
        let (l, r) = (kv(&[(Some(1), Some(10), 1)]), kv(&[(Some(2), Some(20), 1)]));
        let out = flow.step(&changes_of(&l, &r)).unwrap();
        assert_eq!(
            net(&out),
            rows(&[("1,10,NULL,NULL", 1), ("NULL,NULL,2,20", 1)])
        );

        // Checkpoint: every state's delta; recovery: a new dataflow loads them.
        let mut copy = Dataflow::new(&plan()).unwrap();
        for (from, to) in flow.state().unwrap().into_iter().zip(copy.state().unwrap()) {
            assert!(from.take_delta().unwrap().is_some());
            to.restore(&from.dump().unwrap()).unwrap();
        }
        copy.restored().unwrap();
        let (l, r) = (kv(&[(Some(2), Some(21), 1)]), kv(&[(Some(1), Some(11), 1)]));
        let a = flow.step(&changes_of(&l, &r)).unwrap();
        let b = copy.step(&changes_of(&l, &r)).unwrap();
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
    }
}
