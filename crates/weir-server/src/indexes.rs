//! `CREATE INDEX` and `DROP INDEX`: orders of a table's or materialized
//! view's rows that lookups read (`lookup.rs`). An index is a catalog
//! entry; its content is built per chunk of rows on first use and
//! follows every write and every epoch by construction (a chunk never
//! changes), so creating one takes no time and nothing is written but the
//! catalog.

use datafusion::sql::sqlparser::ast::{CreateIndex, Expr as SqlExpr, ObjectName};

use crate::catalog::{normalize_ident, relation_name, Catalog, IndexDef, ObjectKind};
use crate::error::{SqlState, WeirError, WeirResult};
use crate::session::{Output, Session};

/// `CREATE INDEX [IF NOT EXISTS] [name] ON relation (columns)`.
pub async fn create(session: &mut Session, create: &CreateIndex) -> WeirResult<Output> {
    let db = session.db.clone();
    let mut working = db.working().await;
    let Some(index) = new_index(session, &working.catalog, create)? else {
        return Ok(Output::command("CREATE INDEX"));
    };
    add_index(&mut working.catalog, index);
    working.catalog_changed();
    let epoch = working.epoch;
    std::mem::drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("CREATE INDEX"))
}

/// The index `create` adds to `catalog` (its id not given yet), or `None`
/// when `IF NOT EXISTS` finds its name taken (a notice says so).
pub(crate) fn new_index(
    session: &mut Session,
    catalog: &Catalog,
    create: &CreateIndex,
) -> WeirResult<Option<IndexDef>> {
    refuse_unsupported(create)?;
    let relation = relation_name(&create.table_name)?;
    let columns = indexed_columns(catalog, &relation, create)?;
    let name = match &create.name {
        Some(name) => relation_name(name)?,
        None => default_name(catalog, &relation, create),
    };
    if catalog.names_index(&name) || catalog.kind_of(&name).is_some() {
        if create.if_not_exists {
            session.notice(format!("relation \"{name}\" already exists, skipping"));
            return Ok(None);
        }
        return Err(crate::ddl::duplicate_relation(&name));
    }
    Ok(Some(IndexDef {
        id: 0,
        name,
        relation,
        columns,
    }))
}

/// Adds `index` to `catalog` under the catalog's next id.
pub(crate) fn add_index(catalog: &mut Catalog, mut index: IndexDef) {
    index.id = catalog.take_id();
    catalog.indexes.insert(index.name.clone(), index);
}

/// `DROP INDEX [IF EXISTS] names`.
pub async fn drop_indexes(
    session: &mut Session,
    names: &[ObjectName],
    if_exists: bool,
) -> WeirResult<Output> {
    let db = session.db.clone();
    let mut working = db.working().await;
    let mut catalog = working.catalog.clone();
    for object in names {
        let name = relation_name(object)?;
        if catalog.indexes.remove(&name).is_some() {
            continue;
        }
        if catalog.kind_of(&name).is_some() {
            return Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not an index"),
            ));
        }
        if !if_exists {
            return Err(WeirError::new(
                SqlState::UNDEFINED_OBJECT,
                format!("index \"{name}\" does not exist"),
            ));
        }
        session.notice(format!("index \"{name}\" does not exist, skipping"));
    }
    working.catalog.indexes = catalog.indexes;
    working.catalog_changed();
    let epoch = working.epoch;
    std::mem::drop(working);
    db.wait_committed(epoch).await?;
    Ok(Output::command("DROP INDEX"))
}

/// Forgets the indexes of relations that no longer exist (after a `DROP`
/// of their table or view).
pub fn forget_orphans(catalog: &mut Catalog) {
    let (tables, views) = (&catalog.tables, &catalog.materialized_views);
    catalog.indexes.retain(|_, index| {
        tables.contains_key(&index.relation) || views.contains_key(&index.relation)
    });
}

/// Refuses the forms an index here cannot honour.
fn refuse_unsupported(create: &CreateIndex) -> WeirResult<()> {
    let refused = if create.unique {
        Some(
            "CREATE UNIQUE INDEX is not supported: use a UNIQUE constraint \
             (ALTER TABLE ... ADD CONSTRAINT name UNIQUE (columns))",
        )
    } else if create.predicate.is_some() {
        Some("partial indexes (CREATE INDEX ... WHERE) are not supported")
    } else if !create.with.is_empty() {
        Some("index storage parameters (WITH (...)) are not supported")
    } else {
        None
    };
    match refused {
        Some(message) => Err(WeirError::unsupported(message)),
        None => Ok(()),
    }
}

/// The columns of `create` as indices into `relation`'s columns.
fn indexed_columns(
    catalog: &Catalog,
    relation: &str,
    create: &CreateIndex,
) -> WeirResult<Vec<usize>> {
    let names: Vec<&str> = match catalog.kind_of(relation) {
        Some(ObjectKind::Table) if catalog.tables.contains_key(relation) => catalog.tables
            [relation]
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect(),
        Some(ObjectKind::MaterializedView) => catalog.materialized_views[relation]
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect(),
        Some(_) => {
            return Err(WeirError::new(
                SqlState::WRONG_OBJECT_TYPE,
                format!("cannot create index on relation \"{relation}\""),
            )
            .with_detail("Only tables and materialized views have indexes."))
        }
        None => return Err(crate::catalog::undefined_relation(relation)),
    };
    let types = match catalog.tables.get(relation) {
        Some(table) => table.schema(),
        None => catalog.materialized_views[relation].schema(),
    };
    if create.columns.is_empty() {
        return Err(WeirError::new(
            SqlState::SYNTAX_ERROR,
            "an index needs at least one column",
        ));
    }
    create
        .columns
        .iter()
        .map(|column| {
            let SqlExpr::Identifier(ident) = &column.column.expr else {
                return Err(WeirError::unsupported(format!(
                    "indexes on expressions are not supported: {}",
                    column.column.expr
                )));
            };
            let name = normalize_ident(ident);
            let at = names.iter().position(|n| *n == name).ok_or_else(|| {
                WeirError::new(
                    SqlState::UNDEFINED_COLUMN,
                    format!("column \"{name}\" does not exist"),
                )
            })?;
            let data_type = types.field(at).data_type();
            if !weir_state::orderable(data_type) {
                return Err(WeirError::unsupported(format!(
                    "column \"{name}\" cannot be indexed: lookups by {} are not supported",
                    crate::types::pg_type_name(data_type)
                )));
            }
            Ok(at)
        })
        .collect()
}

/// PostgreSQL's name for an unnamed index: `<relation>_<columns>_idx`,
/// numbered if that is taken.
fn default_name(catalog: &Catalog, relation: &str, create: &CreateIndex) -> String {
    let columns: Vec<String> = create
        .columns
        .iter()
        .map(|c| match &c.column.expr {
            SqlExpr::Identifier(ident) => normalize_ident(ident),
            _ => "expr".to_owned(),
        })
        .collect();
    let base = format!("{relation}_{}_idx", columns.join("_"));
    let taken = |name: &str| catalog.names_index(name) || catalog.kind_of(name).is_some();
    if !taken(&base) {
        return base;
    }
    (1..)
        .map(|n| format!("{base}{n}"))
        .find(|name| !taken(name))
        .expect("some number is free")
}
