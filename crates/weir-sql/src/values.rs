//! A fast path for bulk `INSERT ... VALUES` of plain literals.
//!
//! sqlparser spends most of a 500-row INSERT's parse on the values: every
//! expression is first tried as a typed string (`DATE '...'`), and the
//! failed attempt formats an error message with its location. Bulk loads
//! are almost always plain literals, so a statement of the form
//!
//! ```text
//! INSERT INTO name [(column, ...)] VALUES (literal, ...), ... [;]
//! ```
//!
//! where every literal is a string without backslashes, an integer
//! (optionally negative), `NULL`, `TRUE` or `FALSE`, is scanned here in one
//! pass over its bytes. Its head (`INSERT INTO name (columns)`) is still
//! parsed by sqlparser, with a one-row `VALUES` list, and the scanned rows
//! replace that row: the statement is exactly the one sqlparser would
//! produce. Anything else (comments, casts, expressions, parameters,
//! decimals, escape strings, more statements) returns `None`, and the text
//! takes sqlparser's path.

use datafusion::sql::sqlparser::ast::{Expr, Parens, SetExpr, Statement, UnaryOperator, Value};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// The statement `sql` holds, if it is a bulk INSERT of plain literals.
pub(crate) fn parse_insert_values(sql: &str) -> Option<Statement> {
    let mut scan = Scanner {
        text: sql.as_bytes(),
        pos: 0,
    };
    scan.skip_space()?;
    scan.keyword("insert")?;
    scan.skip_space()?;
    scan.keyword("into")?;
    scan.skip_space()?;
    scan.name()?;
    scan.skip_space()?;
    if scan.peek() == Some(b'(') {
        scan.pos += 1;
        loop {
            scan.skip_space()?;
            scan.identifier()?;
            scan.skip_space()?;
            match scan.next()? {
                b',' => continue,
                b')' => break,
                _ => return None,
            }
        }
        scan.skip_space()?;
    }
    let head_end = scan.pos;
    scan.keyword("values")?;
    let mut rows = Vec::new();
    loop {
        scan.skip_space()?;
        if scan.next()? != b'(' {
            return None;
        }
        let mut row = Vec::new();
        loop {
            scan.skip_space()?;
            row.push(scan.literal(sql)?);
            scan.skip_space()?;
            match scan.next()? {
                b',' => continue,
                b')' => break,
                _ => return None,
            }
        }
        rows.push(Parens::with_empty_span(row));
        scan.skip_space()?;
        match scan.peek() {
            Some(b',') => scan.pos += 1,
            Some(b';') => {
                scan.pos += 1;
                scan.skip_space()?;
                if scan.peek().is_some() {
                    return None;
                }
                break;
            }
            None => break,
            Some(_) => return None,
        }
    }
    let head = format!("{} VALUES (NULL)", &sql[..head_end]);
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, &head).ok()?;
    let mut statement = statements.pop().filter(|_| statements.is_empty())?;
    let Statement::Insert(insert) = &mut statement else {
        return None;
    };
    let SetExpr::Values(values) = insert.source.as_mut()?.body.as_mut() else {
        return None;
    };
    values.rows = rows;
    Some(statement)
}

/// A cursor over the statement's bytes. Every method returns `None` for
/// anything outside the fast path's grammar.
struct Scanner<'a> {
    text: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    /// Skips whitespace; a comment is outside the grammar.
    fn skip_space(&mut self) -> Option<()> {
        while let Some(byte) = self.peek() {
            match byte {
                b' ' | b'\t' | b'\n' | b'\r' => self.pos += 1,
                b'-' if self.text.get(self.pos + 1) == Some(&b'-') => return None,
                b'/' if self.text.get(self.pos + 1) == Some(&b'*') => return None,
                _ => break,
            }
        }
        Some(())
    }

    /// A bare word, compared case-insensitively: the word itself, not the
    /// start of a longer one.
    fn word(&mut self) -> Option<&[u8]> {
        let start = self.pos;
        if !self
            .peek()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        {
            return None;
        }
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        {
            self.pos += 1;
        }
        Some(&self.text[start..self.pos])
    }

    fn keyword(&mut self, keyword: &str) -> Option<()> {
        self.word()?
            .eq_ignore_ascii_case(keyword.as_bytes())
            .then_some(())
    }

    /// A bare or double-quoted identifier (sqlparser reads it again from
    /// the head's text).
    fn identifier(&mut self) -> Option<()> {
        if self.peek() != Some(b'"') {
            return self.word().map(|_| ());
        }
        self.pos += 1;
        loop {
            match self.next()? {
                b'"' if self.peek() == Some(b'"') => self.pos += 1,
                b'"' => return Some(()),
                _ => {}
            }
        }
    }

    /// `identifier [. identifier]...`
    fn name(&mut self) -> Option<()> {
        self.identifier()?;
        while self.peek() == Some(b'.') {
            self.pos += 1;
            self.identifier()?;
        }
        Some(())
    }

    /// A literal as sqlparser would parse it: `'text'` (quotes doubled,
    /// no backslashes), `123`, `-123`, `NULL`, `TRUE`, `FALSE`.
    fn literal(&mut self, sql: &str) -> Option<Expr> {
        let value = |value: Value| Expr::Value(value.with_empty_span());
        match self.peek()? {
            b'\'' => {
                self.pos += 1;
                let start = self.pos;
                let mut doubled = false;
                loop {
                    match self.next()? {
                        b'\\' => return None,
                        b'\'' if self.peek() == Some(b'\'') => {
                            doubled = true;
                            self.pos += 1;
                        }
                        b'\'' => break,
                        _ => {}
                    }
                }
                let raw = &sql[start..self.pos - 1];
                let text = if doubled {
                    raw.replace("''", "'")
                } else {
                    raw.to_owned()
                };
                // `'a' 'b'` continues a string in SQL: not in this path.
                self.skip_space()?;
                if self.peek() == Some(b'\'') {
                    return None;
                }
                Some(value(Value::SingleQuotedString(text)))
            }
            b'-' => {
                self.pos += 1;
                let digits = self.digits(sql)?;
                Some(Expr::UnaryOp {
                    op: UnaryOperator::Minus,
                    expr: Box::new(value(Value::Number(digits, false))),
                })
            }
            b'0'..=b'9' => Some(value(Value::Number(self.digits(sql)?, false))),
            _ => {
                let word = self.word()?;
                if word.eq_ignore_ascii_case(b"null") {
                    Some(value(Value::Null))
                } else if word.eq_ignore_ascii_case(b"true") {
                    Some(value(Value::Boolean(true)))
                } else if word.eq_ignore_ascii_case(b"false") {
                    Some(value(Value::Boolean(false)))
                } else {
                    None
                }
            }
        }
    }

    /// An unsigned integer's digits; a decimal point, exponent or letter
    /// after them is outside the grammar.
    fn digits(&mut self, sql: &str) -> Option<String> {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        let after = self.peek();
        if self.pos == start
            || after.is_some_and(|b| b == b'.' || b == b'_' || b.is_ascii_alphanumeric())
        {
            return None;
        }
        Some(sql[start..self.pos].to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fast path yields exactly sqlparser's statement.
    #[test]
    fn same_statement_as_sqlparser() {
        for sql in [
            "INSERT INTO t VALUES (1, 'a', NULL, true, FALSE, -5)",
            "insert into \"My Table\" (a, \"B\") values (1,'it''s'),(2, '')  ;  ",
            "INSERT INTO public.t(x) VALUES\n(0)\n,\t(-0), (9223372036854775807)",
            "INSERT INTO t VALUES ('naïve ☃', 12345678901234567890123)",
        ] {
            let fast = parse_insert_values(sql).unwrap_or_else(|| panic!("{sql}: not taken"));
            let slow = Parser::parse_sql(&PostgreSqlDialect {}, sql)
                .unwrap()
                .remove(0);
            assert_eq!(fast, slow, "{sql}");
        }
    }

    #[test]
    fn anything_else_is_left_to_sqlparser() {
        for sql in [
            "INSERT INTO t VALUES (1.5)",
            "INSERT INTO t VALUES (1e3)",
            "INSERT INTO t VALUES ('a'::text)",
            "INSERT INTO t VALUES (1 + 1)",
            "INSERT INTO t VALUES ($1)",
            "INSERT INTO t VALUES (DEFAULT)",
            "INSERT INTO t VALUES ('a\\b')",
            "INSERT INTO t VALUES ('a' 'b')",
            "INSERT INTO t VALUES (E'x')",
            "INSERT INTO t VALUES (1) -- comment",
            "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)",
            "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING",
            "INSERT INTO t VALUES (1) RETURNING x",
            "INSERT INTO t SELECT 1",
            "INSERT INTO t VALUES ('unterminated",
            "INSERT INTO t VALUES (1",
            "UPDATE t SET x = 1",
        ] {
            assert!(parse_insert_values(sql).is_none(), "{sql}");
        }
    }
}
