//! PostgreSQL names of Arrow types and the assignment rules between them.

use datafusion::arrow::datatypes::DataType;

/// The PostgreSQL name of the type a column of `data_type` has.
pub fn pg_type_name(data_type: &DataType) -> String {
    match data_type {
        DataType::Null => "unknown".into(),
        DataType::Boolean => "boolean".into(),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint".into(),
        DataType::Int32 | DataType::UInt16 => "integer".into(),
        DataType::Int64 | DataType::UInt32 => "bigint".into(),
        DataType::UInt64 => "numeric".into(),
        DataType::Float16 | DataType::Float32 => "real".into(),
        DataType::Float64 => "double precision".into(),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => format!("numeric({p},{s})"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea".into(),
        DataType::FixedSizeBinary(_) => "bytea".into(),
        DataType::Date32 | DataType::Date64 => "date".into(),
        DataType::Time32(_) | DataType::Time64(_) => "time without time zone".into(),
        DataType::Timestamp(_, None) => "timestamp without time zone".into(),
        DataType::Timestamp(_, Some(_)) => "timestamp with time zone".into(),
        DataType::Interval(_) | DataType::Duration(_) => "interval".into(),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            format!("{}[]", pg_type_name(f.data_type()))
        }
        other => other.to_string(),
    }
}

/// The PostgreSQL name of the type of a column with `field`: a JSON type
/// its extension names, `uuid` or `varchar` as tagged, else its Arrow
/// type's.
pub fn pg_field_type_name(field: &datafusion::arrow::datatypes::Field) -> String {
    match crate::json::JsonKind::of(field) {
        Some(kind) => kind.name().to_owned(),
        None if crate::uuid_type::is_uuid(field) => "uuid".to_owned(),
        None if crate::varchar::is_varchar(field) => "character varying".to_owned(),
        None => pg_type_name(field.data_type()),
    }
}

#[derive(PartialEq, Eq)]
enum Category {
    Unknown,
    Boolean,
    Numeric,
    String,
    Binary,
    DateTime,
    Time,
    Interval,
    Other,
}

fn category(data_type: &DataType) -> Category {
    use DataType::*;
    match data_type {
        Null => Category::Unknown,
        Boolean => Category::Boolean,
        Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64 | Float16 | Float32
        | Float64 | Decimal32(..) | Decimal64(..) | Decimal128(..) | Decimal256(..) => {
            Category::Numeric
        }
        Utf8 | LargeUtf8 | Utf8View => Category::String,
        Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => Category::Binary,
        Date32 | Date64 | Timestamp(..) => Category::DateTime,
        Time32(_) | Time64(_) => Category::Time,
        Interval(_) | Duration(_) => Category::Interval,
        _ => Category::Other,
    }
}

/// Whether a value of type `from` may be stored in a column of type `to`
/// (PostgreSQL's assignment casts, roughly): within a category, from text
/// (text literals convert, or fail with 22P02), from anything to text,
/// and between arrays whose elements are assignable (`ARRAY[1]`, a
/// `bigint[]`, into an `integer[]` column).
pub fn assignable(from: &DataType, to: &DataType) -> bool {
    if let (DataType::List(from), DataType::List(to)) = (from, to) {
        return assignable(from.data_type(), to.data_type());
    }
    let (from_cat, to_cat) = (category(from), category(to));
    from == to
        || from_cat == Category::Unknown
        || from_cat == Category::String
        || to_cat == Category::String
        || (from_cat == to_cat && from_cat != Category::Other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::TimeUnit;

    #[test]
    fn assignment_rules() {
        assert!(assignable(&DataType::Int64, &DataType::Int32));
        assert!(assignable(&DataType::Utf8, &DataType::Int32));
        assert!(assignable(&DataType::Int32, &DataType::Utf8));
        assert!(assignable(
            &DataType::Date32,
            &DataType::Timestamp(TimeUnit::Nanosecond, None)
        ));
        assert!(!assignable(&DataType::Boolean, &DataType::Int32));
        assert!(!assignable(&DataType::Int32, &DataType::Boolean));
        assert!(!assignable(&DataType::Date32, &DataType::Float64));
        let list = |t: DataType| DataType::new_list(t, true);
        assert!(assignable(&list(DataType::Int64), &list(DataType::Int32)));
        assert!(!assignable(
            &list(DataType::Boolean),
            &list(DataType::Int32)
        ));
        assert_eq!(pg_type_name(&DataType::Int32), "integer");
    }
}
