//! `statement_timeout` while a statement plans.
//!
//! A statement's timeout (`handler.rs`) is a tokio timeout around its
//! future, which can fire only when the future waits; planning never waits
//! (the analyzer, the optimizer and the physical optimizer run their rules
//! one after another on the thread), so a statement that took seconds to
//! plan ran on past its timeout until it had a plan. The handler runs each
//! statement inside [`with_deadline`], a task-local value its planning can
//! see, and the session's planner has a [`Check`] after each of its rules,
//! which fails the statement with 57014 once the deadline has passed. A
//! rule that itself runs long still finishes first.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::{AnalyzerRule, OptimizerConfig, OptimizerRule};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use tokio::time::Instant;

use crate::error::{SqlState, WeirError};

tokio::task_local! {
    /// When the running statement's time is up, if it has a timeout.
    static DEADLINE: Option<Instant>;
}

/// Runs `statement` with `deadline` as the time its planning must end by.
pub async fn with_deadline<F: Future>(deadline: Option<Instant>, statement: F) -> F::Output {
    DEADLINE.scope(deadline, statement).await
}

/// Fails with 57014 if the statement being planned on this task is past
/// its deadline; planning outside a statement is never stopped.
fn check() -> Result<()> {
    let deadline = DEADLINE.try_with(|deadline| *deadline).ok().flatten();
    match deadline {
        Some(deadline) if Instant::now() >= deadline => {
            Err(DataFusionError::External(Box::new(WeirError::new(
                SqlState::QUERY_CANCELED,
                "canceling statement due to statement timeout",
            ))))
        }
        _ => Ok(()),
    }
}

/// A planner rule that changes nothing and stops the statement once its
/// deadline has passed.
#[derive(Default)]
pub struct Check;

impl fmt::Debug for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("weir_planning_deadline")
    }
}

impl AnalyzerRule for Check {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        check()?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "weir_planning_deadline"
    }
}

impl OptimizerRule for Check {
    fn name(&self) -> &str {
        "weir_planning_deadline"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        check()?;
        Ok(Transformed::no(plan))
    }
}

impl PhysicalOptimizerRule for Check {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        check()?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "weir_planning_deadline"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `rules` with `check` after each of them.
pub fn checked_between<T: ?Sized>(rules: Vec<Arc<T>>, check: Arc<T>) -> Vec<Arc<T>> {
    rules
        .into_iter()
        .flat_map(|rule| [rule, check.clone()])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn planning_past_the_deadline_fails_with_57014() {
        assert!(check().is_ok(), "no statement, no deadline");
        let past = Some(Instant::now());
        let error = with_deadline(past, async { check() }).await.unwrap_err();
        assert_eq!(WeirError::from_datafusion(error).code.0, "57014");
        let later = Some(Instant::now() + std::time::Duration::from_secs(60));
        assert!(with_deadline(later, async { check() }).await.is_ok());
        assert!(with_deadline(None, async { check() }).await.is_ok());
    }
}
