//! CREATE TABLE, CREATE VIEW, DROP.

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Constraint;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    visit_relations, ColumnOption, CreateTable, CreateView, NullsDistinctOption, ObjectName,
    ObjectType, Statement, TableConstraint, UniqueConstraint,
};

use crate::catalog::{relation_name, Catalog, ColumnDef, ObjectKind, TableDef, UniqueDef, ViewDef};
use crate::dml;
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// `CREATE TABLE` (with or without `AS SELECT`); `append_only`: `APPEND
/// ONLY`, which a `WATERMARK FOR` clause needs.
pub async fn create_table(
    session: &mut Session,
    create: &CreateTable,
    append_only: bool,
    watermark: Option<&weir_sql::WatermarkClause>,
) -> WeirResult<Output> {
    let db = session.db.clone();
    let mut working = db.working().await;
    let snapshot = db.working_snapshot(&working);
    let planned = plan_table(session, snapshot, create, append_only, watermark).await?;
    let PlannedTable {
        mut def,
        sequences,
        rows,
    } = match planned {
        Planned::Table(table) => *table,
        Planned::Skipped(output) => return Ok(output),
    };
    let ids = crate::sequences::ddl::allocate_ids(&mut working.catalog, sequences.len());
    crate::sequences::ddl::add_column_sequences(
        &mut working.catalog,
        &ids,
        &db.sequences,
        &mut def,
        &sequences,
    );
    let id = working.create_table(def.clone())?;
    let tag = fill_table(&def, working.table_mut(id)?, rows)?;
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(tag)
}

/// A `CREATE TABLE` planned against `snapshot` (the working state's, or a
/// transaction block's), before anything is created.
pub enum Planned {
    /// The name is taken and the statement said `IF NOT EXISTS`: its
    /// output.
    Skipped(Output),
    /// The table to create.
    Table(Box<PlannedTable>),
}

/// What a planned `CREATE TABLE` creates.
pub struct PlannedTable {
    /// The table's definition.
    pub def: TableDef,
    /// The sequences its `SERIAL` and identity columns need.
    pub sequences: Vec<crate::sequences::ddl::ColumnSequence>,
    /// The rows of its `AS SELECT`.
    pub rows: Option<datafusion::arrow::record_batch::RecordBatch>,
}

/// Plans `create` against `snapshot`'s catalog: claims its name, writes
/// its `SERIAL` and identity columns out, checks and plans it, and runs
/// its `AS SELECT` (before the caller touches any catalog, so that a
/// failed or cancelled query leaves nothing behind).
pub async fn plan_table(
    session: &mut Session,
    snapshot: crate::database::DbSnapshot,
    create: &CreateTable,
    append_only: bool,
    watermark: Option<&weir_sql::WatermarkClause>,
) -> WeirResult<Planned> {
    if let Some(skipped) = claim_table_name(session, &snapshot.catalog, create)? {
        return Ok(Planned::Skipped(skipped));
    }
    let (create, sequences) = crate::sequences::ddl::serial_columns(create, &snapshot.catalog)?;
    check_create_table(&create, append_only, watermark)?;
    session.pinned.pin(Arc::new(snapshot));
    let memory = plan_columns(session, &create).await?;
    let def = table_def(session, &create, &memory, append_only, watermark)?;
    let rows = match create.query {
        Some(_) => {
            let input = Arc::unwrap_or_clone(memory.input);
            let (_, batches) = session.collect(input).await?;
            Some(dml::conform(&def, &batches)?)
        }
        None => None,
    };
    Ok(Planned::Table(Box::new(PlannedTable {
        def,
        sequences,
        rows,
    })))
}

/// Writes an `AS SELECT`'s `rows` into the new table `def`, whose state
/// is `table`; returns the statement's output.
pub fn fill_table(
    def: &TableDef,
    table: &mut weir_state::StateTable,
    rows: Option<datafusion::arrow::record_batch::RecordBatch>,
) -> WeirResult<Output> {
    let Some(rows) = rows else {
        return Ok(Output::command("CREATE TABLE"));
    };
    let count = rows.num_rows();
    dml::check_write(def, &rows, table.write(&[], Some(&rows))?)?;
    Ok(Output::Command {
        tag: "SELECT",
        rows: Some(count),
    })
}

/// What `CREATE TABLE` refuses before it plans: options Weir does not
/// take, and a watermark on a table that is not append-only.
fn check_create_table(
    create: &CreateTable,
    append_only: bool,
    watermark: Option<&weir_sql::WatermarkClause>,
) -> WeirResult<()> {
    check_table_options(create)?;
    if watermark.is_some() && !append_only {
        return Err(WeirError::unsupported(
            "WATERMARK FOR needs an APPEND ONLY table: a watermark cannot hold for rows that change",
        ));
    }
    Ok(())
}

/// The definition of the table `create` declares, from its planned
/// columns and constraints (`memory`).
pub fn table_def(
    session: &Session,
    create: &CreateTable,
    memory: &datafusion::logical_expr::CreateMemoryTable,
    append_only: bool,
    watermark: Option<&weir_sql::WatermarkClause>,
) -> WeirResult<TableDef> {
    let name = relation_name(&create.name)?;
    let mut primary_key = Vec::new();
    for constraint in memory.constraints.iter() {
        match constraint {
            Constraint::PrimaryKey(columns) => primary_key = columns.clone(),
            // Read from the statement, with their names.
            Constraint::Unique(_) => {}
        }
    }
    let schema = memory.input.schema();
    check_columns(
        &name,
        create,
        schema.fields().iter().map(|f| f.name().as_str()),
    )?;
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate() {
        let default = create.columns.get(i).and_then(|c| {
            c.options.iter().find_map(|o| match &o.option {
                ColumnOption::Default(expr) => Some(expr.to_string()),
                _ => None,
            })
        });
        let declared = create
            .columns
            .get(i)
            .and_then(|c| declared_type(&c.data_type));
        columns.push(ColumnDef {
            name: field.name().clone(),
            identity: None,
            data_type: storage_type(field.data_type()),
            nullable: field.is_nullable() && !primary_key.contains(&i),
            default,
            max_chars: create.columns.get(i).and_then(|c| char_limit(&c.data_type)),
            display_scale: crate::numeric_display::stored_scale(field.data_type(), declared),
            declared,
            json: crate::json::JsonKind::of(field),
        });
    }
    let watermark = watermark
        .map(|clause| crate::event_time::watermark_def(session, &columns, clause))
        .transpose()?;
    let unique = unique_constraints(&name, create, &columns, &primary_key)?;
    Ok(TableDef {
        id: 0,
        name,
        columns,
        primary_key,
        append_only,
        watermark,
        connector: None,
        unique,
    })
}

/// The `pg_type` OID and typmod of a declared type whose Arrow type does
/// not tell them: character types, `numeric` and `uuid`.
fn declared_type(
    data_type: &datafusion::sql::sqlparser::ast::DataType,
) -> Option<crate::catalog::DeclaredType> {
    use datafusion::sql::sqlparser::ast::{DataType as Sql, ExactNumberInfo};
    let (oid, typmod) = match data_type {
        Sql::Varchar(_) | Sql::CharacterVarying(_) | Sql::CharVarying(_) => (
            crate::varchar::OID,
            char_limit(data_type).map_or(-1, |n| n as i32 + 4),
        ),
        Sql::Char(_) | Sql::Character(_) => {
            (1042, char_limit(data_type).map_or(5, |n| n as i32 + 4))
        }
        Sql::Numeric(info) | Sql::Decimal(info) | Sql::Dec(info) => {
            let typmod = match info {
                ExactNumberInfo::None => -1,
                ExactNumberInfo::Precision(p) => ((*p as i32) << 16) + 4,
                ExactNumberInfo::PrecisionAndScale(p, s) => ((*p as i32) << 16) + (*s as i32) + 4,
            };
            (1700, typmod)
        }
        Sql::Uuid => (crate::uuid_type::OID, -1),
        _ => return None,
    };
    Some(crate::catalog::DeclaredType { oid, typmod })
}

/// The `n` of `varchar(n)`, `char(n)` and their spellings.
fn char_limit(data_type: &datafusion::sql::sqlparser::ast::DataType) -> Option<u64> {
    use datafusion::sql::sqlparser::ast::{CharacterLength, DataType as Sql};
    match data_type {
        Sql::Varchar(Some(CharacterLength::IntegerLength { length, .. }))
        | Sql::CharacterVarying(Some(CharacterLength::IntegerLength { length, .. }))
        | Sql::CharVarying(Some(CharacterLength::IntegerLength { length, .. }))
        | Sql::Char(Some(CharacterLength::IntegerLength { length, .. }))
        | Sql::Character(Some(CharacterLength::IntegerLength { length, .. })) => Some(*length),
        _ => None,
    }
}

/// Types are stored as DataFusion plans them, except that a time zone is
/// always UTC: Weir stores instants, as PostgreSQL does for timestamptz.
pub fn storage_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Timestamp(unit, Some(_)) => DataType::Timestamp(*unit, Some("+00:00".into())),
        other => other.clone(),
    }
}

/// Column names must be distinct and not Weir's own; there is at most one
/// primary key and it names each column once.
fn check_columns<'a>(
    table: &str,
    create: &CreateTable,
    names: impl Iterator<Item = &'a str>,
) -> WeirResult<()> {
    let mut seen = BTreeSet::new();
    for name in names {
        if name.starts_with("__weir") || name == weir_state::ROW_ID_COLUMN {
            return Err(WeirError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column name \"{name}\" conflicts with a system column name"),
            ));
        }
        if !seen.insert(name) {
            return Err(WeirError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            ));
        }
    }
    let column_keys = create
        .columns
        .iter()
        .filter(|c| {
            c.options
                .iter()
                .any(|o| matches!(o.option, ColumnOption::PrimaryKey(_)))
        })
        .count();
    let mut key_columns = Vec::new();
    let mut table_keys = 0;
    for constraint in &create.constraints {
        if let TableConstraint::PrimaryKey(key) = constraint {
            table_keys += 1;
            key_columns.extend(key.columns.iter().map(|c| c.column.expr.to_string()));
        }
    }
    if column_keys + table_keys > 1 {
        return Err(WeirError::new(
            SqlState::INVALID_TABLE_DEFINITION,
            format!("multiple primary keys for table \"{table}\" are not allowed"),
        ));
    }
    let mut unique = BTreeSet::new();
    for column in key_columns {
        if !unique.insert(column.to_lowercase()) {
            return Err(WeirError::new(
                SqlState::DUPLICATE_COLUMN,
                format!("column \"{column}\" appears twice in primary key constraint"),
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_table_options(create: &CreateTable) -> WeirResult<()> {
    if create.temporary {
        return Err(WeirError::unsupported("temporary tables are not supported"));
    }
    for column in &create.columns {
        for option in &column.options {
            match &option.option {
                ColumnOption::Null
                | ColumnOption::NotNull
                | ColumnOption::Default(_)
                | ColumnOption::PrimaryKey(_) => {}
                ColumnOption::Unique(unique) => check_unique_form(unique)?,
                other => {
                    return Err(WeirError::unsupported(format!(
                        "column constraint {other} is not supported yet"
                    )))
                }
            }
        }
    }
    for constraint in &create.constraints {
        match constraint {
            TableConstraint::PrimaryKey(_) => {}
            TableConstraint::Unique(unique) => check_unique_form(unique)?,
            _ => {
                return Err(WeirError::unsupported(format!(
                    "table constraint {constraint} is not supported yet"
                )))
            }
        }
    }
    Ok(())
}

/// Refuses the forms of `UNIQUE` Weir does not enforce.
pub(crate) fn check_unique_form(unique: &UniqueConstraint) -> WeirResult<()> {
    if unique.nulls_distinct == NullsDistinctOption::NotDistinct {
        return Err(WeirError::unsupported("UNIQUE NULLS NOT DISTINCT"));
    }
    if unique.characteristics.is_some() {
        return Err(WeirError::unsupported(
            "DEFERRABLE and INITIALLY constraints",
        ));
    }
    Ok(())
}

/// The `UNIQUE` constraints of `create` (on its columns `columns`, named
/// as given or `<table>_<columns>_key` as PostgreSQL names them); their
/// ids are given when the table is created.
fn unique_constraints(
    table: &str,
    create: &CreateTable,
    columns: &[ColumnDef],
    primary_key: &[usize],
) -> WeirResult<Vec<UniqueDef>> {
    let index_of = |name: &str| -> WeirResult<usize> {
        columns.iter().position(|c| c.name == name).ok_or_else(|| {
            WeirError::new(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{name}\" named in key does not exist"),
            )
        })
    };
    let mut declared: Vec<(Option<String>, Vec<usize>)> = Vec::new();
    for column in &create.columns {
        for option in &column.options {
            if let ColumnOption::Unique(unique) = &option.option {
                let name = unique.name.as_ref().map(crate::catalog::normalize_ident);
                let at = index_of(&crate::catalog::normalize_ident(&column.name))?;
                declared.push((name, vec![at]));
            }
        }
    }
    for constraint in &create.constraints {
        if let TableConstraint::Unique(unique) = constraint {
            let name = unique.name.as_ref().map(crate::catalog::normalize_ident);
            declared.push((name, unique_columns(unique, index_of)?));
        }
    }
    let mut unique: Vec<UniqueDef> = Vec::new();
    for (name, at) in declared {
        // The key already holds its columns unique; PostgreSQL would make
        // a second index, which changes nothing.
        if at == primary_key || unique.iter().any(|u| u.columns == at) {
            continue;
        }
        let name = name.unwrap_or_else(|| {
            let names: Vec<&str> = at.iter().map(|&i| columns[i].name.as_str()).collect();
            let base = unique_name(table, &names);
            let mut name = base.clone();
            let mut n = 0;
            while unique.iter().any(|u| u.name == name) {
                n += 1;
                name = format!("{base}{n}");
            }
            name
        });
        if unique.iter().any(|u| u.name == name) {
            return Err(duplicate_relation(&name));
        }
        unique.push(UniqueDef {
            id: 0,
            name,
            columns: at,
        });
    }
    Ok(unique)
}

/// The columns `UNIQUE (...)` names, as indices `index_of` finds.
pub(crate) fn unique_columns(
    unique: &UniqueConstraint,
    index_of: impl Fn(&str) -> WeirResult<usize>,
) -> WeirResult<Vec<usize>> {
    unique
        .columns
        .iter()
        .map(|c| match &c.column.expr {
            datafusion::sql::sqlparser::ast::Expr::Identifier(ident) => {
                index_of(&crate::catalog::normalize_ident(ident))
            }
            other => Err(WeirError::unsupported(format!(
                "UNIQUE on an expression ({other})"
            ))),
        })
        .collect()
}

/// The name PostgreSQL gives an unnamed `UNIQUE` constraint on `columns`
/// of `table`.
pub(crate) fn unique_name(table: &str, columns: &[&str]) -> String {
    format!("{table}_{}_key", columns.join("_"))
}

/// Checks that a new relation's name is free. When it is taken and the
/// statement says `IF NOT EXISTS`, sends PostgreSQL's NOTICE and returns
/// the statement's tag, for the caller to return at once.
pub fn claim_name(
    session: &mut Session,
    catalog: &Catalog,
    name: &str,
    if_not_exists: bool,
    tag: &'static str,
) -> WeirResult<Option<Output>> {
    // Indexes share the relations' names, as in PostgreSQL.
    if catalog.kind_of(name).is_none() && !catalog.names_index(name) {
        return Ok(None);
    }
    if !if_not_exists {
        return Err(duplicate_relation(name));
    }
    session.notice(format!("relation \"{name}\" already exists, skipping"));
    Ok(Some(Output::command(tag)))
}

/// [`claim_name`] for a `CREATE TABLE`.
pub fn claim_table_name(
    session: &mut Session,
    catalog: &Catalog,
    create: &CreateTable,
) -> WeirResult<Option<Output>> {
    let name = relation_name(&create.name)?;
    claim_name(
        session,
        catalog,
        &name,
        create.if_not_exists,
        "CREATE TABLE",
    )
}

/// Plans a `CREATE TABLE` (or the columns of a `CREATE SOURCE`) with
/// DataFusion against the session's pinned snapshot: its columns' types,
/// constraints and `AS SELECT` input.
pub async fn plan_columns(
    session: &Session,
    create: &CreateTable,
) -> WeirResult<datafusion::logical_expr::CreateMemoryTable> {
    let plan = session
        .plan(Statement::CreateTable(create.clone()), &None)
        .await?;
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(memory)) => Ok(memory),
        _ => Err(WeirError::unsupported(format!(
            "CREATE TABLE form: {create}"
        ))),
    }
}

pub fn duplicate_relation(name: &str) -> WeirError {
    WeirError::new(
        SqlState::DUPLICATE_TABLE,
        format!("relation \"{name}\" already exists"),
    )
}

/// `CREATE [OR REPLACE] VIEW`.
pub async fn create_view(session: &mut Session, create: &CreateView) -> WeirResult<Output> {
    if create.materialized {
        return Err(WeirError::unsupported(
            "materialized views are not supported yet",
        ));
    }
    let db = session.db.clone();
    let mut working = db.working().await;
    let name = relation_name(&create.name)?;
    match working.catalog.kind_of(&name) {
        Some(ObjectKind::Table | ObjectKind::MaterializedView | ObjectKind::Sink) => {
            return Err(duplicate_relation(&name))
        }
        Some(ObjectKind::View) if create.if_not_exists => {
            session.notice(format!("relation \"{name}\" already exists, skipping"));
            return Ok(Output::command("CREATE VIEW"));
        }
        Some(ObjectKind::View) if !create.or_replace => return Err(duplicate_relation(&name)),
        _ => {}
    }
    let query = create.query.to_string();
    if references(&query).contains(&name) {
        return Err(WeirError::new(
            SqlState("42P17"),
            format!("infinite recursion detected in view \"{name}\""),
        ));
    }
    // Plan once now, so a view that cannot be planned is refused here.
    session.pinned.pin(Arc::new(db.working_snapshot(&working)));
    let plan = session
        .plan(Statement::Query(create.query.clone()), &None)
        .await?;
    let width = plan.schema().fields().len();
    let columns: Vec<String> = create
        .columns
        .iter()
        .map(|c| c.name.value.clone())
        .collect();
    if columns.len() > width {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "CREATE VIEW specifies more column names than columns",
        ));
    }
    working.catalog.views.insert(
        name.clone(),
        ViewDef {
            name,
            query,
            columns,
        },
    );
    working.catalog_changed();
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("CREATE VIEW"))
}

/// Names of the relations a query text refers to.
pub(crate) fn references(query: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    if let Ok(statements) = weir_sql::parse(query) {
        for statement in statements {
            if let weir_sql::WeirStatement::Sql(statement) = statement {
                let _ = visit_relations(&statement, |relation: &ObjectName| {
                    if let Ok(name) = relation_name(relation) {
                        names.insert(name);
                    }
                    ControlFlow::<()>::Continue(())
                });
            }
        }
    }
    names
}

/// Plain and materialized views that refer to `name`.
fn dependents(catalog: &Catalog, name: &str) -> Vec<(ObjectKind, String)> {
    let plain = catalog
        .views
        .values()
        .filter(|v| v.name != name && references(&v.query).contains(name))
        .map(|v| (ObjectKind::View, v.name.clone()));
    let materialized = catalog
        .materialized_views
        .values()
        .filter(|v| v.name != name && v.depends_on.iter().any(|d| d == name))
        .map(|v| match v.sink {
            Some(_) => (ObjectKind::Sink, v.name.clone()),
            None => (ObjectKind::MaterializedView, v.name.clone()),
        });
    plain.chain(materialized).collect()
}

fn kind_noun(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Table => "table",
        ObjectKind::View => "view",
        ObjectKind::MaterializedView => "materialized view",
        ObjectKind::Source => "source",
        ObjectKind::Sink => "sink",
        ObjectKind::Sequence => "sequence",
    }
}

/// The kind of relation a `DROP` of `object_type` drops.
pub fn drop_kind(object_type: ObjectType) -> WeirResult<ObjectKind> {
    match object_type {
        ObjectType::Table => Ok(ObjectKind::Table),
        ObjectType::View => Ok(ObjectKind::View),
        ObjectType::MaterializedView => Ok(ObjectKind::MaterializedView),
        other => Err(WeirError::unsupported(format!(
            "DROP {other} is not supported"
        ))),
    }
}

/// `DROP TABLE` / `VIEW` / `MATERIALIZED VIEW` / `SOURCE`
/// `[IF EXISTS] names [CASCADE]`.
pub async fn drop_relations(
    session: &mut Session,
    wanted: ObjectKind,
    names: &[ObjectName],
    if_exists: bool,
    cascade: bool,
) -> WeirResult<Output> {
    let noun = kind_noun(wanted);
    let tag = match wanted {
        ObjectKind::Table => "DROP TABLE",
        ObjectKind::View => "DROP VIEW",
        ObjectKind::MaterializedView => "DROP MATERIALIZED VIEW",
        ObjectKind::Source => "DROP SOURCE",
        ObjectKind::Sink => "DROP SINK",
        ObjectKind::Sequence => "DROP SEQUENCE",
    };
    let db = session.db.clone();
    let mut working = db.working().await;
    // Work out everything to drop on a copy first, so that an error leaves
    // the working state untouched.
    let mut catalog = working.catalog.clone();
    let mut dropped_tables = Vec::new();
    let mut dropped_views = Vec::new();
    let mut dropped_logs = Vec::new();
    let requested: BTreeSet<String> = names.iter().map(relation_name).collect::<WeirResult<_>>()?;
    let mut done: BTreeSet<String> = BTreeSet::new();
    for object in names {
        let name = relation_name(object)?;
        if done.contains(&name) {
            continue;
        }
        if crate::system::SYSTEM_TABLES.contains(&name.as_str()) {
            return Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is a system table and cannot be dropped"),
            ));
        }
        match catalog.kind_of(&name) {
            None => {
                if if_exists {
                    session.notice(format!("{noun} \"{name}\" does not exist, skipping"));
                    continue;
                }
                return Err(WeirError::new(
                    SqlState::UNDEFINED_TABLE,
                    format!("{noun} \"{name}\" does not exist"),
                ));
            }
            Some(kind) if kind != wanted => {
                return Err(WeirError::new(
                    SqlState::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not a {noun}"),
                ))
            }
            Some(_) => {}
        }
        let mut pending = vec![name.clone()];
        while let Some(next) = pending.pop() {
            // Dependents named in the same statement are dropped anyway.
            let users: Vec<(ObjectKind, String)> = dependents(&catalog, &next)
                .into_iter()
                .filter(|(_, u)| cascade || !requested.contains(u))
                .collect();
            if !users.is_empty() && !cascade {
                let detail: Vec<String> = users
                    .iter()
                    .map(|(kind, u)| format!("{} {u} depends on {next}", kind_noun(*kind)))
                    .collect();
                return Err(WeirError::new(
                    SqlState("2BP01"),
                    format!("cannot drop {noun} {name} because other objects depend on it"),
                )
                .with_detail(detail.join("\n")));
            }
            for (kind, user) in users {
                done.insert(user.clone());
                session.notice(format!("drop cascades to {} {user}", kind_noun(kind)));
                catalog.views.remove(&user);
                if catalog.materialized_views.remove(&user).is_some() {
                    dropped_views.push(user.clone());
                }
                pending.push(user);
            }
        }
        if catalog.tables.remove(&name).is_some() {
            dropped_tables.push(name.clone());
        }
        if catalog.materialized_views.remove(&name).is_some() {
            dropped_views.push(name.clone());
        }
        catalog.views.remove(&name);
        if let Some(def) = catalog.sources.remove(&name) {
            // A file source's log goes with it.
            dropped_logs.push(def.id);
        }
    }
    // Sequences the dropped tables own go with them: other tables'
    // defaults that use them stop it, or with CASCADE go too.
    let orphaned = crate::sequences::ddl::defaults_on_owned(&catalog, &dropped_tables);
    if !orphaned.is_empty() && !cascade {
        let detail: Vec<String> = orphaned
            .iter()
            .map(|(table, column, sequence)| {
                format!("default value for column {column} of table {table} depends on sequence {sequence}")
            })
            .collect();
        return Err(WeirError::new(
            SqlState("2BP01"),
            format!(
                "cannot drop {noun} {} because other objects depend on it",
                dropped_tables.join(", ")
            ),
        )
        .with_detail(detail.join("\n"))
        .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
    }
    for (table, column, _) in orphaned {
        session.notice(format!(
            "drop cascades to default value for column {column} of table {table}"
        ));
        if let Some(def) = working.catalog.tables.get_mut(&table) {
            for c in def.columns.iter_mut().filter(|c| c.name == column) {
                c.default = None;
            }
        }
    }
    working.catalog.views = catalog.views;
    working.catalog.sources = catalog.sources;
    for id in dropped_logs {
        working.tables.remove(&id);
    }
    for name in dropped_views {
        working.catalog.materialized_views.remove(&name);
        db.send_control(weir_stream::runtime::Command::Drop(name.clone()));
        db.forget_failure(&name);
    }
    let mut fed = Vec::new();
    for name in dropped_tables {
        if let Some(def) = working.catalog.tables.get(&name) {
            fed.extend(crate::cdc::upstream_of(&db, &working.catalog, def));
        }
        working.drop_table(&name);
        crate::sequences::ddl::drop_owned(&mut working.catalog, &db.sequences, &name);
    }
    crate::indexes::forget_orphans(&mut working.catalog);
    crate::views::refresh_tracking(&mut working);
    working.catalog_changed();
    let epoch = working.epoch;
    drop(working);
    db.wait_committed(epoch).await?;
    // A dropped table's replication slot goes too, as DROP SUBSCRIPTION
    // drops PostgreSQL's: the upstream would keep WAL for it otherwise.
    for upstream in fed {
        if let Err(e) = upstream.drop_upstream().await {
            session.notice(format!(
                "could not drop replication slot \"{}\" upstream ({e}); drop it there",
                upstream.slot
            ));
        }
    }
    Ok(Output::command(tag))
}
