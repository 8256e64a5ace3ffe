//! `ALTER TABLE`: columns added, dropped and renamed, defaults and
//! `NOT NULL` set and dropped, `UNIQUE` constraints added and dropped,
//! and the table renamed, as migration tools (Alembic, Django, Rails)
//! write them.
//!
//! A table's rows live in chunks whose schema is the table's, so an
//! `ALTER TABLE` that changes the columns writes the table again: its
//! rows are read at the working state (kept columns by name, added ones
//! from their defaults, evaluated per row as an `INSERT` evaluates them,
//! `nextval` included), checked against the new definition, and stored
//! under a new table id in the same epoch as the old one's removal. So
//! the change commits whole or not at all, and through a crash. It costs
//! a pass over the table's rows (PostgreSQL adds a column without a
//! volatile default in place). The table's indexes follow their columns
//! (an index on a dropped column is dropped with it, as PostgreSQL does),
//! and sequences its columns own follow renames and go with a dropped
//! column.
//!
//! Refused with a clear error: a table that materialized views or sinks
//! read (their dataflows were planned against its columns), dropping or
//! renaming a column or renaming the table that plain views name (they
//! are kept as text), tables a connector feeds, constraints other than
//! `UNIQUE` (and dropping the primary key's), `SERIAL`
//! and identity columns added later, changes of a column's type, and
//! `ALTER TABLE` inside a transaction block.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    AlterColumnOperation, AlterTable, AlterTableOperation, ColumnDef as SqlColumnDef,
    RenameTableNameKind, Statement, TableConstraint, UniqueConstraint,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use weir_state::StateTable;

use crate::catalog::{relation_name, undefined_relation, Catalog, ColumnDef, TableDef, UniqueDef};
use crate::catalog_functions::quoted;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// Runs `ALTER TABLE` outside a transaction block.
pub async fn alter_table(session: &mut Session, alter: &AlterTable) -> WeirResult<Output> {
    let db = session.db.clone();
    let mut working = db.working().await;
    let name = relation_name(&alter.name)?;
    let Some(old) = working.catalog.tables.get(&name).cloned() else {
        if working.catalog.kind_of(&name).is_some() {
            return Err(WeirError::new(
                SqlState("42809"),
                format!("\"{name}\" is not a table"),
            ));
        }
        if alter.if_exists {
            session.notice(format!("relation \"{name}\" does not exist, skipping"));
            return Ok(Output::command("ALTER TABLE"));
        }
        return Err(undefined_relation(&name));
    };
    check_alterable(&working.catalog, &old)?;
    let mut change = Change::new(old);
    for operation in &alter.operations {
        change.apply(session, &working.catalog, operation).await?;
    }
    if !change.writes_rows() {
        // At most the name changed: the rows stay where they are.
        change.finish(&mut working.catalog, &db.sequences);
        working.catalog.tables.remove(&name);
        working
            .catalog
            .tables
            .insert(change.def.name.clone(), change.def);
        working.catalog_changed();
    } else {
        session.pinned.pin(Arc::new(db.working_snapshot(&working)));
        let rows = change.rows(session).await?;
        // Ids for the unique constraints added.
        for unique in change.def.unique.iter_mut().filter(|u| u.id == 0) {
            unique.id = working.catalog.take_id();
        }
        let mut state = StateTable::new(change.def.spec())?;
        if let Err(violation) = state.write(&[], Some(&rows))? {
            return Err(change.unbuildable(&rows, violation)?);
        }
        change.finish(&mut working.catalog, &db.sequences);
        working.replace_table(&name, change.def, state);
    }
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("ALTER TABLE"))
}

/// Refuses tables whose columns something else was planned against.
fn check_alterable(catalog: &Catalog, def: &TableDef) -> WeirResult<()> {
    if def.connector.is_some() {
        return Err(WeirError::unsupported(format!(
            "ALTER TABLE of \"{}\", which a connector feeds",
            def.name
        )));
    }
    let readers: Vec<String> = catalog
        .materialized_views
        .values()
        .filter(|v| v.depends_on.iter().any(|d| d == &def.name))
        .map(|v| format!("\"{}\"", v.name))
        .collect();
    if !readers.is_empty() {
        return Err(WeirError::new(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!(
                "cannot alter table \"{}\" because materialized views or sinks read it: {}",
                def.name,
                readers.join(", ")
            ),
        )
        .with_hint("Drop them, alter the table, and create them again."));
    }
    Ok(())
}

/// The plain views that name `table`.
fn plain_views_of(catalog: &Catalog, table: &str) -> Vec<String> {
    catalog
        .views
        .values()
        .filter(|v| crate::ddl::references(&v.query).contains(table))
        .map(|v| v.name.clone())
        .collect()
}

/// Refuses `what` when plain views name the table.
fn check_no_views(catalog: &Catalog, table: &str, what: &str) -> WeirResult<()> {
    let views = plain_views_of(catalog, table);
    if views.is_empty() {
        return Ok(());
    }
    Err(WeirError::new(
        SqlState("2BP01"),
        format!(
            "cannot {what} because views depend on table \"{table}\": {}",
            views.join(", ")
        ),
    )
    .with_hint("Drop the views first and create them again afterwards (Weir keeps a view as its query's text)."))
}

/// An `ALTER TABLE` being worked out: the new definition, and where each
/// of its columns comes from.
struct Change {
    /// The table as it was.
    old: TableDef,
    /// The table as it will be.
    def: TableDef,
    /// For each column of `def`, the old column it keeps (by index), or
    /// `None` for a column added, which takes its default.
    origins: Vec<Option<usize>>,
    /// Columns renamed, old name to new, for the sequences they own.
    renamed: Vec<(String, String)>,
}

impl Change {
    fn new(old: TableDef) -> Self {
        let origins = (0..old.columns.len()).map(Some).collect();
        Change {
            def: old.clone(),
            old,
            origins,
            renamed: Vec::new(),
        }
    }

    /// Whether the rows must be written again: anything but the table's
    /// name changed.
    fn writes_rows(&self) -> bool {
        let mut same_name = self.def.clone();
        same_name.name.clone_from(&self.old.name);
        same_name != self.old
    }

    /// 42701 for column `name`, which the table has.
    fn duplicate_column(&self, name: &str) -> WeirError {
        WeirError::new(
            SqlState::DUPLICATE_COLUMN,
            format!(
                "column \"{name}\" of relation \"{}\" already exists",
                self.old.name
            ),
        )
    }

    /// The index of column `name` of the new definition.
    fn column(&self, name: &str) -> WeirResult<usize> {
        self.def
            .columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| {
                WeirError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!(
                        "column \"{name}\" of relation \"{}\" does not exist",
                        self.old.name
                    ),
                )
            })
    }

    async fn apply(
        &mut self,
        session: &mut Session,
        catalog: &Catalog,
        operation: &AlterTableOperation,
    ) -> WeirResult<()> {
        match operation {
            AlterTableOperation::AddColumn {
                if_not_exists,
                column_def,
                column_position: None,
                ..
            } => {
                let name = crate::catalog::normalize_ident(&column_def.name);
                if self.def.columns.iter().any(|c| c.name == name) {
                    if *if_not_exists {
                        session.notice(format!(
                            "column \"{name}\" of relation \"{}\" already exists, skipping",
                            self.old.name
                        ));
                        return Ok(());
                    }
                    return Err(self.duplicate_column(&name));
                }
                let column = added_column(session, catalog, &self.old.name, column_def).await?;
                self.def.columns.push(column);
                self.origins.push(None);
            }
            AlterTableOperation::DropColumn {
                column_names,
                if_exists,
                ..
            } => {
                check_no_views(catalog, &self.old.name, "drop a column")?;
                for ident in column_names {
                    let name = crate::catalog::normalize_ident(ident);
                    let Ok(i) = self.column(&name) else {
                        if *if_exists {
                            session.notice(format!(
                                "column \"{name}\" of relation \"{}\" does not exist, skipping",
                                self.old.name
                            ));
                            continue;
                        }
                        return Err(self.column(&name).expect_err("no such column"));
                    };
                    if self.def.columns.len() == 1 {
                        return Err(WeirError::unsupported(format!(
                            "dropping \"{name}\", the last column of \"{}\"",
                            self.old.name
                        )));
                    }
                    self.def.columns.remove(i);
                    self.origins.remove(i);
                    // A key that loses a column is dropped, as PostgreSQL
                    // drops the constraint; the rows are then keyed by a
                    // hidden row id.
                    if self.def.primary_key.contains(&i) {
                        self.def.primary_key.clear();
                    }
                    for key in &mut self.def.primary_key {
                        if *key > i {
                            *key -= 1;
                        }
                    }
                    // So does a unique constraint, as PostgreSQL drops it.
                    self.def.unique.retain(|u| !u.columns.contains(&i));
                    for unique in &mut self.def.unique {
                        for c in &mut unique.columns {
                            if *c > i {
                                *c -= 1;
                            }
                        }
                    }
                }
            }
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => {
                check_no_views(catalog, &self.old.name, "rename a column")?;
                let from = crate::catalog::normalize_ident(old_column_name);
                let to = crate::catalog::normalize_ident(new_column_name);
                let i = self.column(&from)?;
                if self.def.columns.iter().any(|c| c.name == to) {
                    return Err(self.duplicate_column(&to));
                }
                self.def.columns[i].name = to.clone();
                self.renamed.push((from, to));
            }
            AlterTableOperation::RenameTable { table_name } => {
                let (RenameTableNameKind::To(new) | RenameTableNameKind::As(new)) = table_name;
                let new = relation_name(new)?;
                check_no_views(catalog, &self.old.name, "rename a table")?;
                if catalog.kind_of(&new).is_some() || catalog.names_index(&new) {
                    return Err(crate::ddl::duplicate_relation(&new));
                }
                self.def.name = new;
            }
            AlterTableOperation::AddConstraint {
                constraint: TableConstraint::Unique(unique),
                not_valid: false,
            } => {
                self.add_unique(catalog, unique)?;
            }
            AlterTableOperation::DropConstraint {
                if_exists, name, ..
            } => {
                let name = crate::catalog::normalize_ident(name);
                if let Some(at) = self.def.unique.iter().position(|u| u.name == name) {
                    self.def.unique.remove(at);
                } else if !self.def.primary_key.is_empty()
                    && name == format!("{}_pkey", self.old.name)
                {
                    self.def.primary_key.clear();
                } else if *if_exists {
                    session.notice(format!(
                        "constraint \"{name}\" of relation \"{}\" does not exist, skipping",
                        self.old.name
                    ));
                    return Ok(());
                } else {
                    return Err(WeirError::new(
                        SqlState::UNDEFINED_OBJECT,
                        format!(
                            "constraint \"{name}\" of relation \"{}\" does not exist",
                            self.old.name
                        ),
                    ));
                }
            }
            AlterTableOperation::AlterColumn { column_name, op } => {
                let i = self.column(&crate::catalog::normalize_ident(column_name))?;
                self.alter_column(session, i, op)?;
            }
            other => {
                return Err(WeirError::unsupported(format!(
                    "ALTER TABLE ... {}",
                    first_words(&other.to_string())
                )))
            }
        }
        Ok(())
    }

    /// `ADD [CONSTRAINT name] UNIQUE (columns)`: checked against the
    /// rows when they are written again.
    fn add_unique(&mut self, catalog: &Catalog, unique: &UniqueConstraint) -> WeirResult<()> {
        crate::ddl::check_unique_form(unique)?;
        let columns = crate::ddl::unique_columns(unique, |name| self.column(name))?;
        let name = match &unique.name {
            Some(name) => crate::catalog::normalize_ident(name),
            None => {
                let names: Vec<&str> = columns
                    .iter()
                    .map(|&i| self.def.columns[i].name.as_str())
                    .collect();
                crate::ddl::unique_name(&self.old.name, &names)
            }
        };
        let taken = catalog.kind_of(&name).is_some()
            || catalog.names_index(&name)
            || self.def.unique.iter().any(|u| u.name == name);
        if taken {
            return Err(crate::ddl::duplicate_relation(&name));
        }
        self.def.unique.push(UniqueDef {
            id: 0,
            name,
            columns,
        });
        Ok(())
    }

    fn alter_column(
        &mut self,
        session: &Session,
        i: usize,
        op: &AlterColumnOperation,
    ) -> WeirResult<()> {
        let column = &mut self.def.columns[i];
        match op {
            AlterColumnOperation::SetNotNull => column.nullable = false,
            AlterColumnOperation::DropNotNull => {
                if self.def.primary_key.contains(&i) {
                    return Err(WeirError::new(
                        SqlState::INVALID_TABLE_DEFINITION,
                        format!("column \"{}\" is in a primary key", column.name),
                    ));
                }
                column.nullable = true;
            }
            AlterColumnOperation::SetDefault { value } => {
                if column.identity.is_some() {
                    return Err(WeirError::new(
                        SqlState::SYNTAX_ERROR,
                        format!("column \"{}\" is an identity column", column.name),
                    )
                    .with_hint("Use ALTER TABLE ... ALTER COLUMN ... DROP IDENTITY instead."));
                }
                let sql = crate::sequences::ddl::canonical_default(value).to_string();
                // Checked as an INSERT would use it.
                session
                    .ctx()
                    .state()
                    .create_logical_expr(&sql, &datafusion::common::DFSchema::empty())?;
                column.default = Some(sql);
            }
            AlterColumnOperation::DropDefault => {
                if column.identity.is_none() {
                    column.default = None;
                }
            }
            AlterColumnOperation::SetDataType { .. } => {
                return Err(WeirError::unsupported(
                    "ALTER TABLE ... ALTER COLUMN ... TYPE",
                ))
            }
            AlterColumnOperation::AddGenerated { .. } => {
                return Err(WeirError::unsupported(
                    "ALTER TABLE ... ALTER COLUMN ... ADD GENERATED",
                ))
            }
        }
        Ok(())
    }

    /// The error for rows that break a constraint of the new definition:
    /// only one added here can (the others held before).
    fn unbuildable(
        &self,
        rows: &datafusion::arrow::record_batch::RecordBatch,
        violation: weir_state::KeyViolation,
    ) -> WeirResult<WeirError> {
        let mut error = crate::dml::violation_error(&self.def, rows, &violation, "is duplicated")?;
        if let Some(unique) = violation.constraint.and_then(|i| self.def.unique.get(i)) {
            error.message = format!("could not create unique index \"{}\"", unique.name);
        }
        Ok(error)
    }

    /// The table's rows in the new definition, read from the session's
    /// pinned snapshot (the working state).
    async fn rows(
        &self,
        session: &Session,
    ) -> WeirResult<datafusion::arrow::record_batch::RecordBatch> {
        let kept: Vec<(usize, usize)> = self
            .origins
            .iter()
            .enumerate()
            .filter_map(|(new, old)| old.map(|old| (new, old)))
            .collect();
        let select = kept
            .iter()
            .map(|&(_, old)| quoted(&self.old.columns[old].name))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!("SELECT {select} FROM {}", quoted(&self.old.name));
        let statement = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
            .ok()
            .and_then(|mut s| s.pop())
            .ok_or_else(|| WeirError::internal(format!("{sql} does not parse")))?;
        let source = session.plan(statement, &None).await?;
        let columns: Vec<usize> = kept.iter().map(|&(new, _)| new).collect();
        crate::dml::plan_rows(session, &self.def, source, &columns).await
    }

    /// Brings the catalog's indexes and sequences along with the new
    /// definition (called once the rows are written).
    fn finish(&self, catalog: &mut Catalog, sequences: &crate::sequences::Sequences) {
        let table = &self.old.name;
        // Indexes follow their columns; one on a dropped column goes.
        let moved = |old: usize| self.origins.iter().position(|&o| o == Some(old));
        let mut gone = Vec::new();
        for index in catalog
            .indexes
            .values_mut()
            .filter(|i| &i.relation == table)
        {
            let columns: Option<Vec<usize>> = index.columns.iter().map(|&c| moved(c)).collect();
            match columns {
                Some(columns) => {
                    index.columns = columns;
                    index.relation = self.def.name.clone();
                }
                None => gone.push(index.name.clone()),
            }
        }
        for name in gone {
            catalog.indexes.remove(&name);
        }
        // Sequences owned by a dropped column go; renames follow.
        let dropped: Vec<&str> = self
            .old
            .columns
            .iter()
            .enumerate()
            .filter(|&(i, _)| moved(i).is_none())
            .map(|(_, c)| c.name.as_str())
            .collect();
        let owned: Vec<String> = catalog
            .sequences
            .values()
            .filter(|s| {
                s.owned_by
                    .as_ref()
                    .is_some_and(|(t, c)| t == table && dropped.contains(&c.as_str()))
            })
            .map(|s| s.name.clone())
            .collect();
        for name in owned {
            if let Some(def) = catalog.sequences.remove(&name) {
                sequences.forget(def.id);
            }
        }
        for sequence in catalog.sequences.values_mut() {
            if let Some((t, c)) = &mut sequence.owned_by {
                if t == table {
                    if let Some((_, to)) = self.renamed.iter().find(|(from, _)| from == c) {
                        *c = to.clone();
                    }
                    *t = self.def.name.clone();
                }
            }
        }
    }
}

/// The definition of a column `ALTER TABLE ... ADD COLUMN` adds, planned
/// as `CREATE TABLE` plans its columns (types, defaults, `NOT NULL`,
/// `varchar(n)`, `numeric(p, s)`).
async fn added_column(
    session: &Session,
    catalog: &Catalog,
    table: &str,
    column: &SqlColumnDef,
) -> WeirResult<ColumnDef> {
    let sql = format!("CREATE TABLE {} ({column})", quoted(table));
    let Some(Statement::CreateTable(create)) = Parser::parse_sql(&PostgreSqlDialect {}, &sql)
        .ok()
        .and_then(|mut s| s.pop())
    else {
        return Err(WeirError::internal(format!("{sql} does not parse")));
    };
    let (create, sequences) = crate::sequences::ddl::serial_columns(&create, catalog)?;
    if !sequences.is_empty() {
        return Err(WeirError::unsupported(
            "adding a SERIAL or identity column to an existing table",
        )
        .with_hint("Create a sequence and add the column with DEFAULT nextval('the_sequence')."));
    }
    let memory = crate::ddl::plan_columns(session, &create).await?;
    let def = crate::ddl::table_def(session, &create, &memory, false, None)?;
    if !def.primary_key.is_empty() {
        return Err(WeirError::unsupported(
            "ALTER TABLE ... ADD COLUMN ... PRIMARY KEY",
        ));
    }
    def.columns
        .into_iter()
        .next()
        .ok_or_else(|| WeirError::internal("an added column planned to none"))
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}
