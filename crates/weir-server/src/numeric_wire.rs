//! Tests of the vendored `arrow_pg::numeric` (a vendored crate's own tests
//! do not run in the workspace): exact `numeric` text and binary forms.

use arrow_pg::numeric::PgNumeric;
use bytes::BytesMut;
use pgwire::api::Type;
use tokio_postgres::types::{FromSql, ToSql};

fn round_trip(text: &str) -> PgNumeric {
    let value = PgNumeric::parse(text).unwrap();
    let mut out = BytesMut::new();
    value.to_sql(&Type::NUMERIC, &mut out).unwrap();
    let back = PgNumeric::from_sql(&Type::NUMERIC, &out).unwrap();
    assert_eq!(back, value, "{text}");
    back
}

#[test]
fn binary_form_keeps_every_digit() {
    for text in [
        "0",
        "0.00",
        "1",
        "-1",
        "123.45",
        "10000",
        "0.0001",
        "-0.000123",
        "12345678901234567890.123456789",
        "99999999999999999999999999999999999999",
        "1.5000",
    ] {
        assert_eq!(round_trip(text).to_text(), text);
    }
}

#[test]
fn binary_form_matches_postgres() {
    // 12345.678 in PostgreSQL: ndigits 3, weight 1, +, dscale 3,
    // groups 1, 2345, 6780.
    let mut out = BytesMut::new();
    PgNumeric::parse("12345.678")
        .unwrap()
        .to_sql(&Type::NUMERIC, &mut out)
        .unwrap();
    let expected: Vec<u8> = [3i16, 1, 0, 3, 1, 2345, 6780]
        .iter()
        .flat_map(|v| v.to_be_bytes())
        .collect();
    assert_eq!(&out[..], &expected[..]);
}

#[test]
fn text_input_takes_exponents() {
    assert_eq!(
        PgNumeric::parse("-1.234E-9").unwrap().to_text(),
        "-0.000000001234"
    );
    assert_eq!(PgNumeric::parse("1.5e3").unwrap().to_text(), "1500");
    assert_eq!(PgNumeric::parse(".5").unwrap().to_text(), "0.5");
    assert!(PgNumeric::parse("1.2.3").is_err());
    assert!(PgNumeric::parse("").is_err());
    assert!(PgNumeric::parse("abc").is_err());
}

#[test]
fn decimals_round_half_away_from_zero_or_refuse() {
    let n = |t: &str| PgNumeric::parse(t).unwrap();
    assert_eq!(n("1.005").to_i128(10, 2), Some(101));
    assert_eq!(n("-1.005").to_i128(10, 2), Some(-101));
    assert_eq!(n("1.004").to_i128(10, 2), Some(100));
    assert_eq!(n("2.5").to_i128(10, 0), Some(3));
    assert_eq!(n("999.995").to_i128(5, 2), None);
    assert_eq!(
        n("12345678901234567890.123456789").to_i128(38, 10),
        Some(123456789012345678901234567890)
    );
    assert_eq!(n("1234567890123456789012345678901").to_i128(38, 10), None);
    assert_eq!(PgNumeric::from_i128(-12345, 3).to_text(), "-12.345");
    assert_eq!(PgNumeric::from_i128(5, 3).to_text(), "0.005");
    assert_eq!(PgNumeric::from_i128(5, -2).to_text(), "500");
    assert_eq!(PgNumeric::from_i128(0, 2).to_text(), "0.00");
}

#[test]
fn unconstrained_numerics_keep_every_digit_or_refuse() {
    let n = |t: &str| PgNumeric::parse(t).unwrap();
    let (p, s) = arrow_pg::numeric::UNCONSTRAINED;
    assert_eq!(n("1.5e-9").to_numeric(p, s), Some(15));
    assert_eq!(n("0.00000000120").to_numeric(p, s), Some(12));
    assert_eq!(n("-1.234E-9").to_numeric(p, s), None);
    assert_eq!(n("-1.234E-9").to_numeric(20, 10), Some(-12));
}

#[test]
fn a_minimum_display_scale_drops_only_trailing_zeros() {
    let n = |v: i128| PgNumeric::from_i128(v, 4);
    assert_eq!(n(199000).with_min_scale(0).to_text(), "19.9");
    assert_eq!(n(199000).with_min_scale(2).to_text(), "19.90");
    assert_eq!(n(50000).with_min_scale(0).to_text(), "5");
    assert_eq!(n(12345).with_min_scale(1).to_text(), "1.2345");
    assert_eq!(n(0).with_min_scale(0).to_text(), "0");
}

#[test]
fn quotients_are_written_with_sixteen_significant_digits() {
    let q = |v: &str| {
        let parsed = PgNumeric::parse(v).unwrap();
        let (_, scale) = parsed.precision_and_scale();
        parsed.with_quotient_scale(0, scale.max(20)).to_text()
    };
    assert_eq!(q("3.33333333333333330000"), "3.3333333333333333");
    assert_eq!(q("0.12500000000000000000"), "0.12500000000000000000");
    assert_eq!(q("2.50000000000000000000"), "2.5000000000000000");
    assert_eq!(q("17636684.14285714285700000000"), "17636684.142857142857");
    assert_eq!(q("0"), "0.00000000000000000000");
    assert_eq!(q("1.04166666666666666667"), "1.04166666666666666667");
    let short = PgNumeric::parse("0.0000333333").unwrap();
    assert_eq!(short.with_quotient_scale(0, 10).to_text(), "0.0000333333");
}
