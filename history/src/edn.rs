//! A reader and printer for the subset of EDN that Jepsen writes: maps, vectors, lists,
//! sets, keywords, symbols, strings, characters, integers, floats, `nil`, booleans,
//! tagged literals (`#jepsen.history.Op{...}`, `#inst "..."`), `;` comments and `#_`.
//!
//! The parser works on `&str` with byte offsets and allocates only for the values it
//! returns. It never panics on input: nesting is limited to [`MAX_DEPTH`], and every
//! error names a line and column (for an unclosed collection or string, the place where
//! it was opened).

use serde_json::{Map, Number, Value};
use std::fmt::{self, Write as _};

/// Deepest nesting of collections, tags and discards the parser accepts. The parser
/// recurses once per level, so this bounds its stack use on hostile input.
pub const MAX_DEPTH: usize = 512;

/// One EDN value. Maps and sets keep their source order and any duplicates: histories
/// are read, not used as lookup tables, and keeping order makes printing reproducible.
#[derive(Debug, Clone, PartialEq)]
pub enum Edn {
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Char(char),
    /// The name without its leading `:`, e.g. `invoke` or `jepsen/op`.
    Keyword(String),
    Symbol(String),
    List(Vec<Edn>),
    Vector(Vec<Edn>),
    Map(Vec<(Edn, Edn)>),
    Set(Vec<Edn>),
    /// A tag (without `#`) and the value it tags; consumers treat the inner value as the
    /// value.
    Tagged(String, Box<Edn>),
}

impl Edn {
    /// The value a tagged literal stands for (itself when not tagged).
    pub fn untagged(&self) -> &Edn {
        let mut value = self;
        while let Edn::Tagged(_, inner) = value {
            value = inner;
        }
        value
    }

    /// The text of a keyword, symbol or string; `None` for anything else.
    pub fn as_name(&self) -> Option<&str> {
        match self.untagged() {
            Edn::Keyword(s) | Edn::Symbol(s) | Edn::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A syntax error, with the 1-based line and column (in characters) it was found at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct EdnError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Parses text holding exactly one EDN value (surrounding whitespace and comments are
/// allowed).
pub fn parse(text: &str) -> Result<Edn, EdnError> {
    let mut parser = EdnParser::new(text);
    let Some((value, _)) = parser.next_value()? else {
        return Err(parser.error_here("expected a value, found the end of input"));
    };
    parser.skip_whitespace();
    if parser.peek().is_some() {
        return Err(parser.error_here("unexpected text after the value"));
    }
    Ok(value)
}

/// A place in the text, kept so that errors can point back at where something started.
#[derive(Debug, Clone, Copy)]
struct Mark {
    pos: usize,
    line: usize,
    line_start: usize,
}

/// What the parser found next inside a collection or at the top level.
enum Item {
    /// A value and the line it starts on.
    Value(Edn, usize),
    /// A closing `)`, `]` or `}` and where it is.
    Close(u8, Mark),
    End,
}

/// Reads EDN values one after another from a string.
///
/// A history is either one big vector (Knossos test data) or one map per line (Jepsen's
/// `history.edn`). For the first, call [`enter_sequence`](Self::enter_sequence) so that
/// [`next_value`](Self::next_value) yields the vector's elements, each with its own line.
pub struct EdnParser<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
    line_start: usize,
    /// The top-level vector or list being read element by element: its closing byte and
    /// where it opened.
    entered: Option<(u8, Mark)>,
}

impl<'a> EdnParser<'a> {
    pub fn new(text: &'a str) -> EdnParser<'a> {
        EdnParser {
            text,
            pos: 0,
            line: 1,
            line_start: 0,
            entered: None,
        }
    }

    /// The next top-level value (or element of the entered sequence) and the 1-based
    /// line where it starts; `None` at the end of input or of the entered sequence.
    pub fn next_value(&mut self) -> Result<Option<(Edn, usize)>, EdnError> {
        let depth = usize::from(self.entered.is_some());
        match self.read_item(depth)? {
            Item::Value(value, line) => Ok(Some((value, line))),
            Item::End => match self.entered {
                Some((close, open)) => Err(self.unclosed(open, close)),
                None => Ok(None),
            },
            Item::Close(found, at) => match self.entered {
                Some((close, _)) if close == found => {
                    self.entered = None;
                    Ok(None)
                }
                Some((close, open)) => Err(self.mismatched(at, found, open, close)),
                None => Err(self.error_at(
                    at,
                    format!("unexpected '{}' with nothing open", char::from(found)),
                )),
            },
        }
    }

    /// If the next value is a vector or list, consumes its opening bracket so that
    /// [`next_value`](Self::next_value) returns its elements one by one, then `None` at
    /// its end (after which reading continues at the top level). Returns whether it did.
    pub fn enter_sequence(&mut self) -> Result<bool, EdnError> {
        if self.entered.is_some() {
            return Ok(false);
        }
        self.skip_whitespace();
        let close = match self.peek() {
            Some(b'[') => b']',
            Some(b'(') => b')',
            _ => return Ok(false),
        };
        let open = self.mark();
        self.pos += 1;
        self.entered = Some((close, open));
        Ok(true)
    }

    /// The 1-based line the parser has reached.
    pub fn line(&self) -> usize {
        self.line
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<u8> {
        self.text.as_bytes().get(self.pos + offset).copied()
    }

    fn mark(&self) -> Mark {
        Mark {
            pos: self.pos,
            line: self.line,
            line_start: self.line_start,
        }
    }

    fn error_at(&self, mark: Mark, message: impl Into<String>) -> EdnError {
        let column = self
            .text
            .get(mark.line_start..mark.pos)
            .map_or(mark.pos.saturating_sub(mark.line_start), |s| {
                s.chars().count()
            });
        EdnError {
            line: mark.line,
            column: column + 1,
            message: message.into(),
        }
    }

    fn error_here(&self, message: impl Into<String>) -> EdnError {
        self.error_at(self.mark(), message)
    }

    fn unclosed(&self, open: Mark, close: u8) -> EdnError {
        let opener = match close {
            b')' => "(",
            b']' => "[",
            _ => "{",
        };
        self.error_at(
            open,
            format!(
                "unclosed '{opener}': the input ends before its '{}'",
                char::from(close)
            ),
        )
    }

    fn mismatched(&self, at: Mark, found: u8, open: Mark, close: u8) -> EdnError {
        let opened = self.error_at(open, "");
        self.error_at(
            at,
            format!(
                "unexpected '{}': expected '{}' to close what line {}, column {} opened",
                char::from(found),
                char::from(close),
                opened.line,
                opened.column
            ),
        )
    }

    /// Slices the text; positions always fall on character boundaries because every
    /// byte the parser stops at is ASCII, but a wrong slice must be an error, not a panic.
    fn slice(&self, start: usize, end: usize) -> Result<&'a str, EdnError> {
        self.text
            .get(start..end)
            .ok_or_else(|| self.error_here("internal error: slice off a character boundary"))
    }

    fn skip_whitespace(&mut self) {
        let bytes = self.text.as_bytes();
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b'\n' => {
                    self.pos += 1;
                    self.line += 1;
                    self.line_start = self.pos;
                }
                b';' => {
                    // The newline itself is left for the next round, which counts it.
                    let rest = bytes.get(self.pos..).unwrap_or_default();
                    self.pos += rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
                }
                _ if is_whitespace(b) => self.pos += 1,
                _ => break,
            }
        }
    }

    /// Reads the token (symbol, number, keyword name, ...) starting at `self.pos`.
    fn read_token(&mut self) -> Result<&'a str, EdnError> {
        let start = self.pos;
        let rest = self.text.as_bytes().get(start..).unwrap_or_default();
        let length = rest
            .iter()
            .position(|&b| is_terminator(b))
            .unwrap_or(rest.len());
        self.pos += length;
        self.slice(start, self.pos)
    }

    fn read_item(&mut self, depth: usize) -> Result<Item, EdnError> {
        if depth > MAX_DEPTH {
            return Err(self.error_here(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        loop {
            self.skip_whitespace();
            let start = self.mark();
            let Some(first) = self.peek() else {
                return Ok(Item::End);
            };
            match first {
                b')' | b']' | b'}' => {
                    self.pos += 1;
                    return Ok(Item::Close(first, start));
                }
                b'#' if self.peek_at(1) == Some(b'_') => {
                    self.pos += 2;
                    match self.read_item(depth + 1)? {
                        Item::Value(..) => {}
                        Item::Close(found, at) => {
                            return Err(self.error_at(
                                at,
                                format!(
                                    "'#_' has nothing to discard before '{}'",
                                    char::from(found)
                                ),
                            ))
                        }
                        Item::End => {
                            return Err(self.error_at(start, "'#_' has nothing to discard"))
                        }
                    }
                }
                _ => {
                    let value = self.read_value(first, start, depth)?;
                    return Ok(Item::Value(value, start.line));
                }
            }
        }
    }

    fn read_value(&mut self, first: u8, start: Mark, depth: usize) -> Result<Edn, EdnError> {
        match first {
            b'(' => {
                self.pos += 1;
                self.read_sequence(b')', start, depth).map(Edn::List)
            }
            b'[' => {
                self.pos += 1;
                self.read_sequence(b']', start, depth).map(Edn::Vector)
            }
            b'{' => {
                self.pos += 1;
                self.read_map(start, depth)
            }
            b'"' => self.read_string(start).map(Edn::Str),
            b'\\' => self.read_char(start).map(Edn::Char),
            b':' => self.read_keyword(start),
            b'#' => self.read_dispatch(start, depth),
            _ => self.read_atom(start),
        }
    }

    fn read_sequence(&mut self, close: u8, open: Mark, depth: usize) -> Result<Vec<Edn>, EdnError> {
        let mut items = Vec::new();
        loop {
            match self.read_item(depth + 1)? {
                Item::Value(value, _) => items.push(value),
                Item::Close(found, _) if found == close => return Ok(items),
                Item::Close(found, at) => return Err(self.mismatched(at, found, open, close)),
                Item::End => return Err(self.unclosed(open, close)),
            }
        }
    }

    fn read_map(&mut self, open: Mark, depth: usize) -> Result<Edn, EdnError> {
        let items = self.read_sequence(b'}', open, depth)?;
        if items.len() % 2 != 0 {
            return Err(self.error_at(
                open,
                format!(
                    "map has an odd number of forms ({}): a key without a value",
                    items.len()
                ),
            ));
        }
        let mut entries = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(key), Some(value)) = (items.next(), items.next()) {
            entries.push((key, value));
        }
        Ok(Edn::Map(entries))
    }

    fn read_string(&mut self, open: Mark) -> Result<String, EdnError> {
        let bytes = self.text.as_bytes();
        self.pos += 1;
        let mut out = String::new();
        let mut segment = self.pos;
        loop {
            let rest = bytes.get(self.pos..).unwrap_or_default();
            let Some(offset) = rest
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b == b'\n')
            else {
                return Err(self.error_at(
                    open,
                    "unclosed string: the input ends before its closing '\"'",
                ));
            };
            let at = self.pos + offset;
            match bytes.get(at) {
                Some(b'\n') => {
                    self.pos = at + 1;
                    self.line += 1;
                    self.line_start = self.pos;
                }
                Some(b'"') => {
                    out.push_str(self.slice(segment, at)?);
                    self.pos = at + 1;
                    return Ok(out);
                }
                _ => {
                    out.push_str(self.slice(segment, at)?);
                    self.pos = at;
                    let escaped = self.read_escape()?;
                    out.push(escaped);
                    segment = self.pos;
                }
            }
        }
    }

    /// Reads the escape sequence at `self.pos` (which is at its backslash) in a string.
    fn read_escape(&mut self) -> Result<char, EdnError> {
        let at = self.mark();
        let simple = match self.peek_at(1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'n') => '\n',
            Some(b't') => '\t',
            Some(b'r') => '\r',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'\'') => '\'',
            Some(b'u') => {
                self.pos += 2;
                return self.read_unicode_escape(at);
            }
            None => {
                return Err(self.error_at(
                    at,
                    "unclosed string: the input ends inside an escape sequence",
                ))
            }
            Some(_) => {
                let shown = self
                    .text
                    .get(self.pos + 1..)
                    .and_then(|s| s.chars().next())
                    .unwrap_or('?');
                return Err(self.error_at(at, format!("unknown escape '\\{shown}' in a string")));
            }
        };
        self.pos += 2;
        Ok(simple)
    }

    /// Reads the four hex digits after `\u` (and a second `\uXXXX` when the first is a
    /// high surrogate, as Java writes characters outside the basic plane).
    fn read_unicode_escape(&mut self, at: Mark) -> Result<char, EdnError> {
        let high = self.read_hex4(at)?;
        let code = if (0xD800..0xDC00).contains(&high) {
            if self.peek() != Some(b'\\') || self.peek_at(1) != Some(b'u') {
                return Err(self.error_at(at, "unpaired surrogate in a '\\u' escape"));
            }
            self.pos += 2;
            let low = self.read_hex4(at)?;
            if !(0xDC00..0xE000).contains(&low) {
                return Err(self.error_at(at, "unpaired surrogate in a '\\u' escape"));
            }
            0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        } else {
            high
        };
        char::from_u32(code)
            .ok_or_else(|| self.error_at(at, "unpaired surrogate in a '\\u' escape"))
    }

    fn read_hex4(&mut self, at: Mark) -> Result<u32, EdnError> {
        let digits = self
            .text
            .as_bytes()
            .get(self.pos..self.pos + 4)
            .filter(|d| d.iter().all(u8::is_ascii_hexdigit))
            .ok_or_else(|| self.error_at(at, "'\\u' must be followed by four hex digits"))?;
        let code = digits
            .iter()
            .fold(0u32, |code, &d| code * 16 + hex_value(d));
        self.pos += 4;
        Ok(code)
    }

    fn read_char(&mut self, start: Mark) -> Result<char, EdnError> {
        self.pos += 1;
        let first = self.text.get(self.pos..).and_then(|s| s.chars().next());
        let first = match first {
            Some(c) if !c.is_whitespace() => c,
            _ => return Err(self.error_at(start, "a '\\' without a character after it")),
        };
        let name_start = self.pos;
        self.pos += first.len_utf8();
        self.read_token()?;
        let name = self.slice(name_start, self.pos)?;
        if name.len() == first.len_utf8() {
            return Ok(first);
        }
        let named = match name {
            "newline" => Some('\n'),
            "space" => Some(' '),
            "tab" => Some('\t'),
            "return" => Some('\r'),
            "backspace" => Some('\u{8}'),
            "formfeed" => Some('\u{c}'),
            _ => None,
        };
        let coded = || {
            let (radix, digits) = if let Some(hex) = name.strip_prefix('u') {
                (16, hex)
            } else {
                (8, name.strip_prefix('o')?)
            };
            let valid_length = if radix == 16 {
                digits.len() == 4
            } else {
                (1..=3).contains(&digits.len())
            };
            if !valid_length || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            let code = u32::from_str_radix(digits, radix).ok()?;
            if radix == 8 && code > 0o377 {
                return None;
            }
            char::from_u32(code)
        };
        named.or_else(coded).ok_or_else(|| {
            self.error_at(
                start,
                format!("unknown character literal '\\{}'", clip(name)),
            )
        })
    }

    fn read_keyword(&mut self, start: Mark) -> Result<Edn, EdnError> {
        self.pos += 1;
        let name = self.read_token()?;
        if name.is_empty() {
            return Err(self.error_at(start, "a ':' without a keyword name"));
        }
        if name.starts_with(':') {
            return Err(self.error_at(start, "auto-resolved keywords ('::name') are not EDN"));
        }
        Ok(Edn::Keyword(name.to_string()))
    }

    fn read_dispatch(&mut self, start: Mark, depth: usize) -> Result<Edn, EdnError> {
        match self.peek_at(1) {
            Some(b'{') => {
                self.pos += 2;
                self.read_sequence(b'}', start, depth).map(Edn::Set)
            }
            Some(b'#') => {
                self.pos += 2;
                match self.read_token()? {
                    "Inf" => Ok(Edn::Float(f64::INFINITY)),
                    "-Inf" => Ok(Edn::Float(f64::NEG_INFINITY)),
                    "NaN" => Ok(Edn::Float(f64::NAN)),
                    other => {
                        Err(self
                            .error_at(start, format!("unknown symbolic value '##{}'", clip(other))))
                    }
                }
            }
            _ => {
                self.pos += 1;
                let tag = self.read_token()?;
                if !tag.chars().next().is_some_and(char::is_alphabetic) {
                    let shown = self
                        .text
                        .get(start.pos..)
                        .and_then(|s| s.chars().nth(1))
                        .map_or_else(String::new, String::from);
                    return Err(self.error_at(
                        start,
                        format!("unsupported '#{shown}': a tag must start with a letter"),
                    ));
                }
                match self.read_item(depth + 1)? {
                    Item::Value(value, _) => Ok(Edn::Tagged(tag.to_string(), Box::new(value))),
                    Item::Close(found, at) => Err(self.error_at(
                        at,
                        format!(
                            "tag '#{}' has no value before '{}'",
                            clip(tag),
                            char::from(found)
                        ),
                    )),
                    Item::End => Err(self.error_at(
                        start,
                        format!("tag '#{}' has no value: the input ends", clip(tag)),
                    )),
                }
            }
        }
    }

    /// Reads a token that is not a keyword: `nil`, a boolean, a number or a symbol.
    fn read_atom(&mut self, start: Mark) -> Result<Edn, EdnError> {
        let token = self.read_token()?;
        let bytes = token.as_bytes();
        let Some(&first) = bytes.first() else {
            // Only reachable if whitespace and terminators disagree; never loop on it.
            self.pos += 1;
            return Err(self.error_at(start, "unexpected character"));
        };
        let numeric = first.is_ascii_digit()
            || (matches!(first, b'+' | b'-') && bytes.get(1).is_some_and(u8::is_ascii_digit));
        if numeric {
            return parse_number(token).map_err(|message| self.error_at(start, message));
        }
        match token {
            "nil" => Ok(Edn::Nil),
            "true" => Ok(Edn::Bool(true)),
            "false" => Ok(Edn::Bool(false)),
            _ if matches!(first, b'@' | b'^' | b'`' | b'~' | b'\'') => Err(self.error_at(
                start,
                format!("reader macro '{}' is not EDN", char::from(first)),
            )),
            _ => Ok(Edn::Symbol(token.to_string())),
        }
    }
}

/// At most 40 characters of a token, for error messages.
fn clip(token: &str) -> &str {
    token
        .char_indices()
        .nth(40)
        .and_then(|(cut, _)| token.get(..cut))
        .unwrap_or(token)
}

fn hex_value(digit: u8) -> u32 {
    match digit {
        b'0'..=b'9' => u32::from(digit - b'0'),
        b'a'..=b'f' => u32::from(digit - b'a' + 10),
        b'A'..=b'F' => u32::from(digit - b'A' + 10),
        _ => 0,
    }
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b',' | 0x0b | 0x0c)
}

/// Bytes that end a token. All ASCII, so a token always ends on a character boundary.
fn is_terminator(b: u8) -> bool {
    is_whitespace(b)
        || matches!(
            b,
            b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'"' | b';' | b'\\'
        )
}

fn parse_number(token: &str) -> Result<Edn, String> {
    let is_float = token.contains(['.', 'e', 'E']) || token.ends_with('M');
    if is_float {
        let body = token.strip_suffix('M').unwrap_or(token);
        let well_formed = body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
        return match body.parse::<f64>() {
            Ok(x) if well_formed => Ok(Edn::Float(x)),
            _ => Err(format!("invalid number '{}'", clip(token))),
        };
    }
    let body = token.strip_suffix('N').unwrap_or(token);
    let digits = body.strip_prefix(['+', '-']).unwrap_or(body);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let hint = if token.contains('/') {
            " (ratios are not supported)"
        } else {
            ""
        };
        return Err(format!("invalid number '{}'{hint}", clip(token)));
    }
    body.parse::<i64>()
        .map(Edn::Int)
        .map_err(|_| format!("integer '{}' does not fit in 64 bits", clip(token)))
}

/// Whether `name` prints as a keyword (`:name`) that reads back as the same keyword, in
/// our parser and in Clojure's.
pub fn is_keyword_name(name: &str) -> bool {
    !name.starts_with(':') && !name.starts_with('/') && !name.ends_with('/') && is_name(name)
}

/// Whether `name` prints as a symbol that reads back as the same symbol.
pub fn is_symbol_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let starts_like_number = match bytes {
        [first, ..] if first.is_ascii_digit() => true,
        [b'+' | b'-' | b'.', second, ..] => second.is_ascii_digit(),
        _ => false,
    };
    !starts_like_number
        && !matches!(name, "nil" | "true" | "false")
        && !name.starts_with([':', '#'])
        && (name == "/" || (!name.starts_with('/') && !name.ends_with('/')))
        && is_name(name)
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| {
            c.is_alphanumeric()
                || matches!(
                    c,
                    '.' | '*'
                        | '+'
                        | '!'
                        | '-'
                        | '_'
                        | '?'
                        | '$'
                        | '%'
                        | '&'
                        | '='
                        | '<'
                        | '>'
                        | '/'
                        | ':'
                        | '#'
                        | '\''
                )
        })
        && !name.starts_with('\'')
}

/// Converts EDN to JSON, as consumers of histories see values: keywords and symbols
/// become their names, sets and lists arrays, tags disappear, and map keys that are not
/// names are printed as EDN.
pub fn to_json(edn: &Edn) -> Value {
    match edn {
        Edn::Nil => Value::Null,
        Edn::Bool(b) => Value::Bool(*b),
        Edn::Int(i) => Value::Number(Number::from(*i)),
        Edn::Float(x) => Number::from_f64(*x).map_or(Value::Null, Value::Number),
        Edn::Str(s) | Edn::Keyword(s) | Edn::Symbol(s) => Value::String(s.clone()),
        Edn::Char(c) => Value::String(c.to_string()),
        Edn::List(items) | Edn::Vector(items) | Edn::Set(items) => {
            Value::Array(items.iter().map(to_json).collect())
        }
        Edn::Map(entries) => {
            let mut object = Map::new();
            for (key, value) in entries {
                let key = match key.untagged() {
                    Edn::Keyword(s) | Edn::Str(s) | Edn::Symbol(s) => s.clone(),
                    other => other.to_string(),
                };
                object.insert(key, to_json(value));
            }
            Value::Object(object)
        }
        Edn::Tagged(_, inner) => to_json(inner),
    }
}

/// Converts JSON to EDN: `null` to `nil`, arrays to vectors, objects to maps whose keys
/// are keywords (strings where the key is not a valid keyword name), so that
/// `to_json(&from_json(v)) == v`. Integers beyond `i64` become floats, as EDN has no
/// unsigned integers.
pub fn from_json(value: &Value) -> Edn {
    match value {
        Value::Null => Edn::Nil,
        Value::Bool(b) => Edn::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Edn::Int(i),
            None => Edn::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Edn::Str(s.clone()),
        Value::Array(items) => Edn::Vector(items.iter().map(from_json).collect()),
        Value::Object(object) => Edn::Map(
            object
                .iter()
                .map(|(key, value)| (name_to_edn(key), from_json(value)))
                .collect(),
        ),
    }
}

/// A keyword for `name` where it is a valid keyword name, else a string.
pub fn name_to_edn(name: &str) -> Edn {
    if is_keyword_name(name) {
        Edn::Keyword(name.to_string())
    } else {
        Edn::Str(name.to_string())
    }
}

/// Prints EDN that [`parse`] reads back as the same value, provided keyword, symbol and
/// tag names are valid names ([`is_keyword_name`], [`is_symbol_name`]); they are printed
/// as they are.
impl fmt::Display for Edn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Edn::Nil => f.write_str("nil"),
            Edn::Bool(b) => write!(f, "{b}"),
            Edn::Int(i) => write!(f, "{i}"),
            Edn::Float(x) => write_float(f, *x),
            Edn::Str(s) => write_string(f, s),
            Edn::Char(c) => write_char(f, *c),
            Edn::Keyword(name) => write!(f, ":{name}"),
            Edn::Symbol(name) => f.write_str(name),
            Edn::List(items) => write_items(f, "(", items, ")"),
            Edn::Vector(items) => write_items(f, "[", items, "]"),
            Edn::Set(items) => write_items(f, "#{", items, "}"),
            Edn::Map(entries) => {
                f.write_char('{')?;
                for (i, (key, value)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{key} {value}")?;
                }
                f.write_char('}')
            }
            Edn::Tagged(tag, inner) => {
                // `#{` would read as a set and `#tag#{` as one token, so only bracketed
                // values may follow the tag directly (as Clojure prints records).
                let separator = match **inner {
                    Edn::Map(_) | Edn::Vector(_) | Edn::List(_) => "",
                    _ => " ",
                };
                write!(f, "#{tag}{separator}{inner}")
            }
        }
    }
}

fn write_items(f: &mut fmt::Formatter<'_>, open: &str, items: &[Edn], close: &str) -> fmt::Result {
    f.write_str(open)?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_char(' ')?;
        }
        write!(f, "{item}")?;
    }
    f.write_str(close)
}

fn write_float(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    if x.is_nan() {
        f.write_str("##NaN")
    } else if x == f64::INFINITY {
        f.write_str("##Inf")
    } else if x == f64::NEG_INFINITY {
        f.write_str("##-Inf")
    } else {
        // Debug is the shortest text that parses back to the same float, and always has
        // a '.' or an exponent, so it never reads back as an integer.
        write!(f, "{x:?}")
    }
}

fn write_string(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        let escape = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\t' => "\\t",
            '\r' => "\\r",
            _ if c.is_control() => "",
            _ => continue,
        };
        f.write_str(s.get(plain..i).unwrap_or_default())?;
        if escape.is_empty() {
            write!(f, "\\u{:04x}", u32::from(c))?;
        } else {
            f.write_str(escape)?;
        }
        plain = i + c.len_utf8();
    }
    f.write_str(s.get(plain..).unwrap_or_default())?;
    f.write_char('"')
}

fn write_char(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '\n' => f.write_str("\\newline"),
        ' ' => f.write_str("\\space"),
        '\t' => f.write_str("\\tab"),
        '\r' => f.write_str("\\return"),
        '\u{8}' => f.write_str("\\backspace"),
        '\u{c}' => f.write_str("\\formfeed"),
        // Other whitespace and controls would not survive as a bare character.
        _ if (c.is_whitespace() || c.is_control()) && u32::from(c) <= 0xFFFF => {
            write!(f, "\\u{:04x}", u32::from(c))
        }
        _ => write!(f, "\\{c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_values_with_lines() {
        let text = "; a comment\n{:a 1, :b [1 2.5 -3N] :c #{nil true}}\n(x \"s\\n\" \\a)";
        let mut parser = EdnParser::new(text);
        let (first, line) = parser.next_value().unwrap().unwrap();
        assert_eq!(line, 2);
        assert_eq!(
            first,
            Edn::Map(vec![
                (Edn::Keyword("a".into()), Edn::Int(1)),
                (
                    Edn::Keyword("b".into()),
                    Edn::Vector(vec![Edn::Int(1), Edn::Float(2.5), Edn::Int(-3)])
                ),
                (
                    Edn::Keyword("c".into()),
                    Edn::Set(vec![Edn::Nil, Edn::Bool(true)])
                ),
            ])
        );
        let (second, line) = parser.next_value().unwrap().unwrap();
        assert_eq!(line, 3);
        assert_eq!(
            second,
            Edn::List(vec![
                Edn::Symbol("x".into()),
                Edn::Str("s\n".into()),
                Edn::Char('a')
            ])
        );
        assert_eq!(parser.next_value().unwrap(), None);
    }

    #[test]
    fn column_counts_characters() {
        let err = parse("[\"é\" }").unwrap_err();
        assert_eq!((err.line, err.column), (1, 6), "{err}");
    }
}
