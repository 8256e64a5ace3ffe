//! `UNION ALL`: every input's changes, as the output schema names them.

use datafusion::arrow::datatypes::SchemaRef;

use crate::{Changes, Operator, Result};

/// Forwards the changes of all inputs.
#[derive(Debug)]
pub struct Union {
    schema: SchemaRef,
}

impl Union {
    /// A union producing `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Union { schema }
    }
}

impl Operator for Union {
    fn process(&mut self, _port: usize, input: Changes) -> Result<Vec<Changes>> {
        Ok(vec![input.with_schema(self.schema.clone())?])
    }
}
