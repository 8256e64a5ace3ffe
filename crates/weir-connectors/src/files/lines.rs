//! Where records end in the bytes of a CSV or JSON-lines file: at line
//! breaks, except (CSV) those inside a quoted field.

/// Finds record ends in a file's bytes, read in chunks: the scan keeps
/// whether it is inside a quoted CSV field across chunks.
#[derive(Debug, Clone, Default)]
pub struct RecordSplitter {
    /// Whether quotes are CSV's (a line break inside one is data).
    csv: bool,
    in_quotes: bool,
}

impl RecordSplitter {
    /// A splitter of CSV records (`csv`) or of JSON lines.
    pub fn new(csv: bool) -> Self {
        RecordSplitter {
            csv,
            in_quotes: false,
        }
    }

    /// The end (after its line break) of the first record that ends in
    /// `bytes`, which start where the last call's record ended; `None`
    /// if none ends there.
    pub fn next_end(&mut self, bytes: &[u8]) -> Option<usize> {
        if !self.csv {
            return memchr::memchr(b'\n', bytes).map(|at| at + 1);
        }
        let mut from = 0;
        while let Some(at) = memchr::memchr2(b'"', b'\n', &bytes[from..]) {
            let at = from + at;
            if bytes[at] == b'"' {
                // A doubled quote inside a field flips twice: no change.
                self.in_quotes = !self.in_quotes;
            } else if !self.in_quotes {
                return Some(at + 1);
            }
            from = at + 1;
        }
        // Scanned to the end without a record end: start over from this
        // record's beginning with the next, longer buffer.
        self.in_quotes = false;
        None
    }
}

/// Whether a record holds nothing but white space (a blank line).
pub fn is_blank(record: &[u8]) -> bool {
    record.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(csv: bool, text: &str) -> Vec<&str> {
        let mut splitter = RecordSplitter::new(csv);
        let mut out = Vec::new();
        let mut rest = text.as_bytes();
        while let Some(end) = splitter.next_end(rest) {
            out.push(std::str::from_utf8(&rest[..end]).expect("utf8"));
            rest = &rest[end..];
        }
        out
    }

    #[test]
    fn csv_line_breaks_inside_quotes_are_data() {
        assert_eq!(
            records(true, "1,\"a\nb\"\r\n2,\"say \"\"hi\"\"\"\n3,x"),
            vec!["1,\"a\nb\"\r\n", "2,\"say \"\"hi\"\"\"\n"]
        );
        assert_eq!(
            records(false, "{\"a\":\"x\"}\n{\"a\":1}\n{"),
            vec!["{\"a\":\"x\"}\n", "{\"a\":1}\n"]
        );
    }

    #[test]
    fn an_open_quote_at_the_end_waits_for_more() {
        let mut splitter = RecordSplitter::new(true);
        assert_eq!(splitter.next_end(b"1,\"a\n"), None);
        assert_eq!(splitter.next_end(b"1,\"a\nb\"\n"), Some(8));
        assert!(is_blank(b" \r\n"));
        assert!(!is_blank(b"1\n"));
    }
}
