//! Predicates of `wait-until` scenario steps. The runner polls the cluster and evaluates
//! the predicate on what it fetched until it holds or the step times out:
//!
//! ```text
//! leader(p/0) == n1 and isr(p/0) == {n1, n2, n3}
//! hw(n2, p/0) >= 100 and local_epoch(n2, p/0) == leader_epoch(p/0)
//! isr(p/0) excludes n3 and hits(n1, controller_before_state_write) > 0
//! ```
//!
//! A predicate is one or more comparisons `operand OP operand` joined by `and` (there is
//! no `or`, `not` or parentheses); whitespace is free-form. An operand is a term or a
//! literal: a non-negative integer (`3`), a node of the cluster (`n1`), `none` (no node),
//! a set `{n1, n2}` (`{}` is empty) or a list `[n1, n2]`.
//!
//! Terms read the system's views through its API (`sut::Api`; our broker's endpoints
//! named below); `N` is a node, `T/P` a partition written `topic/partition` (`p/0`; a
//! topic is `[A-Za-z0-9._-]+`):
//!
//! - from the roles (`GET /v1/metadata`): `leader(T/P)` (node or none), `isr(T/P)` (set),
//!   `replicas(T/P)` (list, in assignment order), `leader_epoch(T/P)` (int),
//!   `controller` (node or none), `controller_epoch` (int, 0 without a controller),
//!   `brokers` (set of registered brokers), `meta_leader` (the metadata leader, node or
//!   none);
//! - from `GET /v1/debug/replicas` on `N`, what `N` knows of its replica of `T/P`:
//!   `hw(N, T/P)`, `leo(N, T/P)` (log end offset), `log_start(N, T/P)`,
//!   `local_epoch(N, T/P)` (leader epoch), `local_controller_epoch(N, T/P)` (the epoch
//!   of the last controller it heard from) (ints), `local_isr(N, T/P)` (set),
//!   `local_leader(N, T/P)` (node or none);
//! - from `GET /v1/debug/failpoints` on `N`: `hits(N, point)` (int: how often `point`
//!   was reached while armed, 0 if never), where `point` is `[a-z_]+`, optionally
//!   targeted at a broker id: `before_isr_write@2`.
//!
//! Operators:
//! - `==`, `!=`: both sides of the same type. Sets compare as sets (order-free). A list
//!   literal compares in order with a list term (`replicas(p/0) == [n1, n2, n3]`); a set
//!   literal or set term against a list term compares as sets
//!   (`replicas(p/0) == {n3, n1, n2}`). A list literal against a set term is an error.
//! - `<`, `<=`, `>`, `>=`: ints only.
//! - `contains`, `excludes`: a set or list on the left; on the right a node (is it a
//!   member / not a member?) or a set or list (are all / none of them members?). A node
//!   term that is `none` is contained in nothing.
//!
//! Parsing is strict: unknown names, wrong arity, malformed partitions, type mismatches,
//! comparisons of two literals and trailing junk are errors giving the 1-based column,
//! e.g. `column 4: unknown node "n9" (the cluster has n1, n2, n3)`.
//!
//! Evaluating fails, and the runner keeps waiting, when what a term reads is missing:
//! no metadata, a node that did not answer, a partition the system does not know, a
//! null epoch.

use std::cmp::Ordering::{Equal, Greater, Less};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sut::{ReplicaView, Roles};

/// A predicate that does not parse: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {reason}")]
pub struct PredicateError {
    pub column: usize,
    pub reason: String,
}

/// Returns a `PredicateError` at column `$col`.
macro_rules! bail {
    ($col:expr, $($fmt:tt)+) => {
        return Err(PredicateError { column: $col, reason: format!($($fmt)+) })
    };
}

/// What evaluating needs fetched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    pub metadata: bool,
    /// Nodes whose /v1/debug/replicas is read.
    pub replicas: BTreeSet<String>,
    /// Nodes whose /v1/debug/failpoints is read.
    pub failpoints: BTreeSet<String>,
}

/// What was fetched.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// The cluster's roles (its metadata).
    pub roles: Option<Roles>,
    /// Per node, what it knows of its replicas.
    pub replicas: BTreeMap<String, Vec<ReplicaView>>,
    /// Per node, its failpoints' hit counts.
    pub hits: BTreeMap<String, BTreeMap<String, u64>>,
}

/// A parsed predicate: comparisons that must all hold.
#[derive(Debug, Clone)]
pub struct Predicate {
    text: String,
    comparisons: Vec<Comparison>,
}

#[derive(Debug, Clone)]
struct Comparison {
    left: Operand,
    op: Op,
    right: Operand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
    Excludes,
}

#[derive(Debug, Clone)]
enum Operand {
    Term(Term),
    Lit(Value),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Node(Option<String>),
    Int(i128),
    Set(BTreeSet<String>),
    List(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Node,
    Int,
    Set,
    List,
}

/// The arguments a term takes: none, `T/P`, `N, T/P` or `N, point`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sig {
    Bare,
    Part,
    NodePart,
    NodePoint,
}

/// A term's name, arguments and type.
#[derive(Debug, PartialEq, Eq)]
struct Spec(&'static str, Sig, Ty);

const SPECS: &[Spec] = {
    use {Sig::*, Ty::*};
    &[
        Spec("leader", Part, Node),
        Spec("isr", Part, Set),
        Spec("replicas", Part, List),
        Spec("leader_epoch", Part, Int),
        Spec("controller", Bare, Node),
        Spec("controller_epoch", Bare, Int),
        Spec("brokers", Bare, Set),
        Spec("meta_leader", Bare, Node),
        Spec("hw", NodePart, Int),
        Spec("leo", NodePart, Int),
        Spec("log_start", NodePart, Int),
        Spec("local_epoch", NodePart, Int),
        Spec("local_isr", NodePart, Set),
        Spec("local_leader", NodePart, Node),
        Spec("local_controller_epoch", NodePart, Int),
        Spec("hits", NodePoint, Int),
    ]
};

impl Spec {
    /// How the term is written, e.g. `hw(N, T/P)`.
    fn usage(&self) -> String {
        let args = match self.1 {
            Sig::Bare => "",
            Sig::Part => "(T/P)",
            Sig::NodePart => "(N, T/P)",
            Sig::NodePoint => "(N, point)",
        };
        format!("{}{args}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    spec: &'static Spec,
    args: Args,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Args {
    None,
    Part(Part),
    NodePart(String, Part),
    NodePoint(String, String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    topic: String,
    partition: u64,
}

fn join<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    names
        .into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Contains => "contains",
            Op::Excludes => "excludes",
        })
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.spec.0;
        match &self.args {
            Args::None => f.write_str(name),
            Args::Part(p) => write!(f, "{name}({p})"),
            Args::NodePart(n, p) => write!(f, "{name}({n}, {p})"),
            Args::NodePoint(n, point) => write!(f, "{name}({n}, {point})"),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Node(n) => f.write_str(n.as_deref().unwrap_or("none")),
            Value::Int(i) => write!(f, "{i}"),
            Value::Set(s) => write!(f, "{{{}}}", join(s)),
            Value::List(l) => write!(f, "[{}]", join(l)),
        }
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Term(t) => t.fmt(f),
            Operand::Lit(v) => v.fmt(f),
        }
    }
}

impl Operand {
    fn ty(&self) -> Ty {
        match self {
            Operand::Term(t) => t.spec.2,
            Operand::Lit(Value::Node(_)) => Ty::Node,
            Operand::Lit(Value::Int(_)) => Ty::Int,
            Operand::Lit(Value::Set(_)) => Ty::Set,
            Operand::Lit(Value::List(_)) => Ty::List,
        }
    }

    /// "leader(p/0) (a node)", for type errors.
    fn typed(&self) -> String {
        let ty = match self.ty() {
            Ty::Node => "a node",
            Ty::Int => "an int",
            Ty::Set => "a set",
            Ty::List => "a list",
        };
        format!("{self} ({ty})")
    }
}

// ----- tokenizer -----------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tk {
    Word(String),
    Op(Op),
    Open(char),
    Close(char),
    Comma,
    Slash,
    End,
}

impl fmt::Display for Tk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tk::Word(w) => write!(f, "\"{w}\""),
            Tk::Op(op) => write!(f, "\"{op}\""),
            Tk::Open(c) | Tk::Close(c) => write!(f, "\"{c}\""),
            Tk::Comma => f.write_str("\",\""),
            Tk::Slash => f.write_str("\"/\""),
            Tk::End => f.write_str("the end of the predicate"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    tk: Tk,
    col: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '@')
}

/// Splits `text` into tokens; columns are 1-based char positions.
fn tokenize(text: &str) -> Result<Vec<Token>, PredicateError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let col = i + 1;
        let (tk, width) = match (c, chars.get(i + 1)) {
            _ if c.is_whitespace() => {
                i += 1;
                continue;
            }
            _ if is_word_char(c) => {
                let word: String = chars[i..]
                    .iter()
                    .take_while(|&&c| is_word_char(c))
                    .collect();
                let width = word.chars().count();
                (Tk::Word(word), width)
            }
            ('=', Some('=')) => (Tk::Op(Op::Eq), 2),
            ('!', Some('=')) => (Tk::Op(Op::Ne), 2),
            ('<', Some('=')) => (Tk::Op(Op::Le), 2),
            ('<', _) => (Tk::Op(Op::Lt), 1),
            ('>', Some('=')) => (Tk::Op(Op::Ge), 2),
            ('>', _) => (Tk::Op(Op::Gt), 1),
            ('(' | '{' | '[', _) => (Tk::Open(c), 1),
            (')' | '}' | ']', _) => (Tk::Close(c), 1),
            (',', _) => (Tk::Comma, 1),
            ('/', _) => (Tk::Slash, 1),
            ('=', _) => bail!(col, "unexpected \"=\" (equality is \"==\")"),
            _ => bail!(col, "unexpected character {c:?}"),
        };
        out.push(Token { tk, col });
        i += width;
    }
    Ok(out)
}

// ----- parser --------------------------------------------------------------------------

struct Parser<'a> {
    toks: Vec<Token>,
    pos: usize,
    end: Token,
    nodes: &'a [String],
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        self.toks.get(self.pos).unwrap_or(&self.end)
    }

    fn next(&mut self) -> Token {
        self.pos += 1;
        self.toks.get(self.pos - 1).unwrap_or(&self.end).clone()
    }

    fn comparison(&mut self) -> Result<Comparison, PredicateError> {
        let left = self.operand()?;
        let t = self.next();
        let op = match &t.tk {
            Tk::Op(op) => *op,
            Tk::Word(w) if w == "contains" => Op::Contains,
            Tk::Word(w) if w == "excludes" => Op::Excludes,
            other => bail!(t.col, "expected an operator after {left}, found {other}"),
        };
        let right = self.operand()?;
        if let Err(reason) = check(&left, op, &right) {
            bail!(t.col, "{reason}");
        }
        Ok(Comparison { left, op, right })
    }

    fn operand(&mut self) -> Result<Operand, PredicateError> {
        let t = self.next();
        let w = match t.tk {
            Tk::Open('{') => {
                let names = self.names(t.col, '}')?;
                return Ok(Operand::Lit(Value::Set(names.into_iter().collect())));
            }
            Tk::Open('[') => return Ok(Operand::Lit(Value::List(self.names(t.col, ']')?))),
            Tk::Word(w) => w,
            other => bail!(t.col, "expected a term or a value, found {other}"),
        };
        if w.chars().all(|c| c.is_ascii_digit()) {
            let Ok(n) = w.parse::<u64>() else {
                bail!(t.col, "integer {w} is too large")
            };
            return Ok(Operand::Lit(Value::Int(n.into())));
        }
        if w == "none" {
            return Ok(Operand::Lit(Value::Node(None)));
        }
        if let Some(spec) = SPECS.iter().find(|s| s.0 == w) {
            return self.term(spec, t.col).map(Operand::Term);
        }
        if self.peek().tk == Tk::Open('(') {
            let known = SPECS.iter().map(|s| s.0).collect::<Vec<_>>().join(", ");
            bail!(t.col, "unknown function \"{w}\" (known: {known})");
        }
        if !self.nodes.contains(&w) {
            let (nodes, bare) = (
                join(self.nodes),
                "controller, controller_epoch, brokers, meta_leader",
            );
            bail!(
                t.col,
                "unknown node \"{w}\" (the cluster has {nodes}; terms without arguments: {bare})"
            );
        }
        Ok(Operand::Lit(Value::Node(Some(w))))
    }

    /// The rest of a set or list literal opened at `open_col`, up to `close`.
    fn names(&mut self, open_col: usize, close: char) -> Result<Vec<String>, PredicateError> {
        let kind = if close == '}' { "set" } else { "list" };
        let mut out = Vec::new();
        if self.peek().tk == Tk::Close(close) {
            self.next();
            return Ok(out);
        }
        loop {
            let t = self.next();
            match t.tk {
                Tk::Word(w) => out.push(self.node(t.col, &w)?),
                Tk::End => bail!(open_col, "unterminated {kind}: missing \"{close}\""),
                other => bail!(t.col, "expected a node name in the {kind}, found {other}"),
            }
            let t = self.next();
            match t.tk {
                Tk::Comma => {}
                Tk::Close(c) if c == close => return Ok(out),
                Tk::End => bail!(open_col, "unterminated {kind}: missing \"{close}\""),
                other => bail!(
                    t.col,
                    "expected \",\" or \"{close}\" in the {kind}, found {other}"
                ),
            }
        }
    }

    fn node(&self, col: usize, w: &str) -> Result<String, PredicateError> {
        if !self.nodes.iter().any(|n| n == w) {
            let nodes = join(self.nodes);
            bail!(col, "unknown node \"{w}\" (the cluster has {nodes})");
        }
        Ok(w.to_owned())
    }

    /// A term named `spec.0` at `col`; its arguments, if any, come next.
    fn term(&mut self, spec: &'static Spec, col: usize) -> Result<Term, PredicateError> {
        let usage = spec.usage();
        let is_call = self.peek().tk == Tk::Open('(');
        let args = match (spec.1, is_call) {
            (Sig::Bare, false) => Args::None,
            (Sig::Bare, true) => bail!(self.peek().col, "{} takes no arguments", spec.0),
            (_, false) => bail!(col, "{} needs arguments: {usage}", spec.0),
            (sig, true) => {
                self.next();
                let args = self.args(sig, &usage)?;
                self.expect(Tk::Close(')'), &usage)?;
                args
            }
        };
        Ok(Term { spec, args })
    }

    /// The arguments of a term with signature `sig`, written `usage`, after its "(".
    fn args(&mut self, sig: Sig, usage: &str) -> Result<Args, PredicateError> {
        if sig == Sig::Part {
            return Ok(Args::Part(self.part(usage)?));
        }
        let (col, w) = self.word("a node N", usage)?;
        if self.peek().tk == Tk::Slash {
            bail!(col, "expected a node N in {usage}, found a partition")
        }
        let node = self.node(col, &w)?;
        self.expect(Tk::Comma, usage)?;
        if sig == Sig::NodePart {
            return Ok(Args::NodePart(node, self.part(usage)?));
        }
        let (col, point) = self.word("a failpoint name", usage)?;
        let (name, target) = point.split_once('@').unwrap_or((point.as_str(), "0"));
        let name_ok = !name.is_empty() && name.chars().all(|c| matches!(c, 'a'..='z' | '_'));
        if !name_ok || target.is_empty() || !target.chars().all(|c| c.is_ascii_digit()) {
            let want = "[a-z_]+, optionally @<broker id>";
            bail!(col, "bad failpoint name \"{point}\" (expected {want})");
        }
        Ok(Args::NodePoint(node, point))
    }

    /// The next token, which must be `tk`.
    fn expect(&mut self, tk: Tk, usage: &str) -> Result<(), PredicateError> {
        let t = self.next();
        let hint = match (&tk, &t.tk) {
            _ if t.tk == tk => return Ok(()),
            (Tk::Close(_), Tk::Comma) => " (too many arguments)",
            (Tk::Comma, Tk::Close(')')) => " (too few arguments)",
            _ => "",
        };
        bail!(t.col, "expected {tk} in {usage}, found {}{hint}", t.tk)
    }

    /// The next token, which must be a word: `what` in `usage`.
    fn word(&mut self, what: &str, usage: &str) -> Result<(usize, String), PredicateError> {
        let t = self.next();
        match t.tk {
            Tk::Word(w) => Ok((t.col, w)),
            Tk::Close(')') => bail!(
                t.col,
                "expected {what} in {usage}, found \")\" (too few arguments)"
            ),
            other => bail!(t.col, "expected {what} in {usage}, found {other}"),
        }
    }

    fn part(&mut self, usage: &str) -> Result<Part, PredicateError> {
        let (col, topic) = self.word("a partition T/P", usage)?;
        if self.peek().tk != Tk::Slash {
            bail!(
                col,
                "expected a partition T/P like p/0 in {usage}, found \"{topic}\""
            );
        }
        if !topic.chars().all(|c| is_word_char(c) && c != '@') {
            bail!(col, "bad topic name \"{topic}\" (use A-Z a-z 0-9 . _ -)");
        }
        self.next();
        let t = self.next();
        match t.tk {
            Tk::Word(number) => match number.parse::<u64>() {
                Ok(partition) => Ok(Part { topic, partition }),
                Err(_) => bail!(t.col, "bad partition \"{topic}/{number}\": not a number"),
            },
            other => bail!(
                t.col,
                "expected a partition number after \"{topic}/\", found {other}"
            ),
        }
    }
}

/// Whether `op` applies to the operands' types; the reason if not.
fn check(l: &Operand, op: Op, r: &Operand) -> Result<(), String> {
    let (lt, rt) = (l.ty(), r.ty());
    let not_ints = [l, r].into_iter().find(|o| o.ty() != Ty::Int);
    match op {
        _ if matches!((l, r), (Operand::Lit(_), Operand::Lit(_))) => Err(format!(
            "{l} {op} {r} compares two constants: one side must be a term"
        )),
        Op::Eq | Op::Ne if lt == rt => Ok(()),
        Op::Eq | Op::Ne => {
            let (set, list) = if lt == Ty::Set { (l, r) } else { (r, l) };
            match (set.ty(), list) {
                (Ty::Set, Operand::Term(t)) if t.spec.2 == Ty::List => Ok(()),
                (Ty::Set, Operand::Lit(Value::List(_))) => Err(format!(
                    "{set} is a set: compare it with a set {{..}}, not a list [..]"
                )),
                _ => Err(format!("cannot compare {} with {}", l.typed(), r.typed())),
            }
        }
        Op::Lt | Op::Le | Op::Gt | Op::Ge => match not_ints {
            Some(o) => Err(format!(
                "\"{op}\" compares ints, but {} is not one",
                o.typed()
            )),
            None => Ok(()),
        },
        _ if !matches!(lt, Ty::Set | Ty::List) => Err(format!(
            "\"{op}\" needs a set or list on its left, not {}",
            l.typed()
        )),
        _ if rt == Ty::Int => Err(format!(
            "\"{op}\" needs a node or a set on its right, not {}",
            r.typed()
        )),
        _ if matches!(r, Operand::Lit(Value::Node(None))) => {
            Err(format!("\"{op} none\" is meaningless"))
        }
        _ => Ok(()),
    }
}

// ----- evaluation ----------------------------------------------------------------------

fn members(v: &Value) -> Option<BTreeSet<&str>> {
    match v {
        Value::Set(s) => Some(s.iter().map(String::as_str).collect()),
        Value::List(l) => Some(l.iter().map(String::as_str).collect()),
        Value::Node(_) | Value::Int(_) => None,
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Set(_), Value::Set(_) | Value::List(_)) | (Value::List(_), Value::Set(_)) => {
            members(a) == members(b)
        }
        _ => a == b,
    }
}

/// `l contains r` (`contains`) or `l excludes r`.
fn holds(l: &Value, r: &Value, contains: bool) -> bool {
    let Some(left) = members(l) else { return false };
    let right = match r {
        Value::Node(Some(n)) => BTreeSet::from([n.as_str()]),
        Value::Node(None) => return !contains,
        other => members(other).unwrap_or_default(),
    };
    right.iter().all(|n| left.contains(n) == contains)
}

/// An epoch that may not exist yet.
fn epoch(epoch: Option<u64>) -> Result<Value, String> {
    epoch
        .map(|e| Value::Int(e.into()))
        .ok_or_else(|| "no epoch yet".to_owned())
}

impl Term {
    fn eval(&self, view: &View) -> Result<Value, String> {
        let Spec(name, _, _) = *self.spec;
        let roles = view.roles.as_ref().ok_or("metadata not fetched");
        match &self.args {
            Args::None => {
                let roles = roles?;
                Ok(match name {
                    "controller" => Value::Node(roles.controller.clone()),
                    "controller_epoch" => Value::Int(roles.controller_epoch.into()),
                    "brokers" => Value::Set(roles.registered.clone()),
                    "meta_leader" => Value::Node(roles.meta_leader.clone()),
                    other => return Err(format!("unknown term {other}")),
                })
            }
            Args::Part(p) => {
                let roles = roles?;
                let entry = u32::try_from(p.partition)
                    .ok()
                    .and_then(|partition| roles.partition(&p.topic, partition))
                    .ok_or_else(|| format!("partition {p} is not in the metadata"))?;
                match name {
                    "leader" => Ok(Value::Node(entry.leader.clone())),
                    "isr" => Ok(Value::Set(entry.isr.iter().cloned().collect())),
                    "replicas" => Ok(Value::List(entry.replicas.clone())),
                    "leader_epoch" => epoch(entry.leader_epoch),
                    other => Err(format!("unknown term {other}")),
                }
            }
            Args::NodePart(n, p) => {
                let replicas = view.replicas.get(n);
                let replicas = replicas.ok_or_else(|| format!("no replicas answer from {n}"))?;
                let r = replicas
                    .iter()
                    .find(|r| r.topic == p.topic && u64::from(r.partition) == p.partition)
                    .ok_or_else(|| format!("{n} has no replica of {p}"))?;
                match name {
                    "hw" => Ok(Value::Int(r.high_watermark.into())),
                    "leo" => Ok(Value::Int(r.log_end_offset.into())),
                    "log_start" => Ok(Value::Int(r.log_start_offset.into())),
                    "local_epoch" => epoch(r.leader_epoch),
                    "local_isr" => Ok(Value::Set(r.isr.iter().cloned().collect())),
                    "local_leader" => Ok(Value::Node(r.leader.clone())),
                    "local_controller_epoch" => r
                        .controller_epoch
                        .map(|e| Value::Int(e.into()))
                        .ok_or_else(|| format!("{n} gave no controller epoch for {p}")),
                    other => Err(format!("unknown term {other}")),
                }
            }
            Args::NodePoint(n, point) => {
                let hits = view.hits.get(n);
                let hits = hits.ok_or_else(|| format!("no failpoints answer from {n}"))?;
                Ok(Value::Int(hits.get(point).copied().unwrap_or(0).into()))
            }
        }
    }
}

impl Operand {
    fn eval(&self, view: &View) -> Result<Value, String> {
        match self {
            Operand::Term(t) => t.eval(view).map_err(|e| format!("{t}: {e}")),
            Operand::Lit(v) => Ok(v.clone()),
        }
    }
}

impl Comparison {
    fn eval(&self, view: &View) -> Result<bool, String> {
        let (l, r) = (self.left.eval(view)?, self.right.eval(view)?);
        let ord = match (&l, &r) {
            (Value::Int(a), Value::Int(b)) => Some(a.cmp(b)),
            _ => None,
        };
        Ok(match self.op {
            Op::Eq => same(&l, &r),
            Op::Ne => !same(&l, &r),
            Op::Lt => ord == Some(Less),
            Op::Le => matches!(ord, Some(Less | Equal)),
            Op::Gt => ord == Some(Greater),
            Op::Ge => matches!(ord, Some(Greater | Equal)),
            Op::Contains => holds(&l, &r, true),
            Op::Excludes => holds(&l, &r, false),
        })
    }
}

impl Predicate {
    /// Parses `text`; `nodes`: the cluster's node names, in order.
    pub fn parse(text: &str, nodes: &[String]) -> Result<Predicate, PredicateError> {
        let end = Token {
            tk: Tk::End,
            col: text.chars().count() + 1,
        };
        let mut p = Parser {
            toks: tokenize(text)?,
            pos: 0,
            end,
            nodes,
        };
        if p.peek().tk == Tk::End {
            bail!(1, "empty predicate");
        }
        let mut comparisons = vec![p.comparison()?];
        loop {
            let t = p.next();
            match t.tk {
                Tk::End => break,
                Tk::Word(w) if w == "and" => comparisons.push(p.comparison()?),
                other => bail!(
                    t.col,
                    "expected \"and\" or the end of the predicate, found {other}"
                ),
            }
        }
        Ok(Predicate {
            text: text.to_owned(),
            comparisons,
        })
    }

    /// Each distinct term once, in order of appearance.
    fn terms(&self) -> Vec<&Term> {
        let mut out: Vec<&Term> = Vec::new();
        for c in &self.comparisons {
            for o in [&c.left, &c.right] {
                match o {
                    Operand::Term(t) if !out.contains(&t) => out.push(t),
                    _ => {}
                }
            }
        }
        out
    }

    /// Every partition a term names, as (topic, partition), each once.
    pub fn partitions(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for t in self.terms() {
            if let Args::Part(p) | Args::NodePart(_, p) = &t.args {
                let named = (p.topic.clone(), p.partition);
                if !out.contains(&named) {
                    out.push(named);
                }
            }
        }
        out
    }

    /// What evaluating needs fetched.
    pub fn needs(&self) -> Needs {
        let mut needs = Needs::default();
        for t in self.terms() {
            match &t.args {
                Args::None | Args::Part(_) => needs.metadata = true,
                Args::NodePart(n, _) => _ = needs.replicas.insert(n.clone()),
                Args::NodePoint(n, _) => _ = needs.failpoints.insert(n.clone()),
            }
        }
        needs
    }

    /// Ok(true/false), or Err(reason) when the view lacks what a term needs (the runner
    /// treats that as "not yet"). The comparisons are evaluated in order, up to the first
    /// false one.
    pub fn eval(&self, view: &View) -> Result<bool, String> {
        for c in &self.comparisons {
            if !c.eval(view)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The source text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// What the terms are now, for a timeout message: `leader(p/0) = n2, isr(p/0) = {n2}`;
    /// a term that cannot be evaluated shows `= ? (reason)`.
    pub fn describe(&self, view: &View) -> String {
        let parts = self.terms().into_iter().map(|t| match t.eval(view) {
            Ok(v) => format!("{t} = {v}"),
            Err(e) => format!("{t} = ? ({e})"),
        });
        parts.collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use driver::views;
    use serde_json::json;

    fn nodes() -> Vec<String> {
        ["n1", "n2", "n3"].map(String::from).to_vec()
    }

    fn view() -> View {
        let metadata = json!({
            "brokers": [{"id": 1}, {"id": 2}, {"id": 3}],
            "controller": {"id": 1, "epoch": 3},
            "metadata_leader": 2,
            "topics": [{"topic": "p", "partitions": [
                {"partition": 0, "replicas": [1, 2, 3], "leader": 1, "leader_epoch": 4,
                 "isr": [1, 2]},
                {"partition": 1, "replicas": [3, 2], "leader": null, "leader_epoch": 5,
                 "isr": []},
            ]}],
        });
        let replicas = json!({"broker_id": 2, "replicas": [
            {"topic": "p", "partition": 0, "leader": 1, "leader_epoch": 4, "isr": [1, 2],
             "log_start_offset": 7, "log_end_offset": 600, "high_watermark": 100,
             "controller_epoch": 3},
            {"topic": "p", "partition": 1, "leader": null, "leader_epoch": null, "isr": [],
             "log_start_offset": 0, "log_end_offset": 0, "high_watermark": 0},
        ]});
        let hits = json!({"hits": {"controller_before_state_write": 2, "before_isr_write@2": 1}});
        let ids = ids();
        View {
            roles: views::roles(&ids, &metadata),
            replicas: BTreeMap::from([(
                "n2".to_owned(),
                views::replicas(&ids, &replicas).unwrap(),
            )]),
            hits: BTreeMap::from([("n1".to_owned(), views::failpoint_hits(&hits).unwrap())]),
        }
    }

    /// Our broker's ids of the nodes: `n<i>` is broker `i`.
    fn ids() -> views::BrokerIds {
        views::BrokerIds((1..=3).map(|i| (format!("n{i}"), i)).collect())
    }

    fn parse(text: &str) -> Predicate {
        Predicate::parse(text, &nodes()).unwrap()
    }

    /// Each non-blank line of `cases` evaluates to `expected` on `view()`.
    fn assert_all(expected: bool, cases: &str) {
        for case in cases.lines().map(str::trim).filter(|l| !l.is_empty()) {
            assert_eq!(parse(case).eval(&view()), Ok(expected), "{case}");
        }
    }

    #[test]
    fn metadata_terms() {
        assert_all(
            true,
            "
            leader(p/0) == n1
            leader(p/1) == none
            leader( p / 0 )!=none
            isr(p/0) == {n1, n2}
            isr(p/1) == {}
            replicas(p/0) == [n1, n2, n3]
            leader_epoch(p/0) == 4
            controller == n1
            controller_epoch == 3
            brokers == {n1, n2, n3}
            meta_leader == n2
            leader(p/0) == controller",
        );
        assert_all(
            false,
            "
            leader(p/0) == n2
            leader(p/1) != none
            isr(p/0) == {n1}
            replicas(p/1) == [n2, n3]
            leader_epoch(p/1) == 4
            controller == n2
            controller_epoch == 0
            brokers == {n1, n2}
            meta_leader == none",
        );
    }

    #[test]
    fn no_controller_is_none_and_epoch_zero() {
        let mut v = view();
        v.roles = views::roles(&ids(), &json!({"controller": null}));
        assert_eq!(
            parse("controller == none and controller_epoch == 0").eval(&v),
            Ok(true)
        );
    }

    #[test]
    fn local_and_failpoint_terms() {
        assert_all(
            true,
            "
            hw(n2, p/0) == 100
            leo(n2, p/0) == 600
            log_start(n2, p/0) == 7
            local_epoch(n2, p/0) == 4
            local_isr(n2, p/0) == {n2, n1}
            local_leader(n2, p/0) == n1
            local_leader(n2, p/1) == none
            local_controller_epoch(n2, p/0) == 3
            local_epoch(n2, p/0) == leader_epoch(p/0)
            local_isr(n2, p/0) == isr(p/0)
            hits(n1, controller_before_state_write) == 2
            hits(n1, before_isr_write@2) == 1
            hits(n1, leader_fetch_response) == 0",
        );
        assert_all(
            false,
            "
            hw(n2, p/0) == 600
            leo(n2, p/0) == hw(n2, p/0)
            log_start(n2, p/0) == 0
            local_epoch(n2, p/0) == 5
            local_isr(n2, p/0) == {n1}
            local_leader(n2, p/0) == n2
            local_controller_epoch(n2, p/0) > 3
            hits(n1, controller_before_state_write) > 2",
        );
    }

    #[test]
    fn int_operators() {
        assert_all(
            true,
            "
            hw(n2, p/0) != 99
            hw(n2, p/0) < 101
            hw(n2, p/0) <= 100
            hw(n2, p/0) > 99
            hw(n2, p/0) >= 100
            hw(n2, p/0) < leo(n2, p/0)
            3 < leader_epoch(p/0)",
        );
        assert_all(
            false,
            "
            hw(n2, p/0) != 100
            hw(n2, p/0) < 100
            hw(n2, p/0) <= 99
            hw(n2, p/0) > 100
            hw(n2, p/0) >= 101",
        );
    }

    #[test]
    fn sets_lists_contains_excludes() {
        assert_all(
            true,
            "
            isr(p/0) == {n2, n1}
            replicas(p/0) == {n3, n1, n2}
            replicas(p/0) != [n3, n2, n1]
            replicas(p/1) == {n2, n3}
            isr(p/0) contains n1
            isr(p/0) excludes n3
            replicas(p/0) contains {n1, n3}
            replicas(p/0) contains [n3, n1]
            isr(p/0) contains {}
            isr(p/0) excludes {n3}
            isr(p/0) contains leader(p/0)
            isr(p/0) excludes leader(p/1)
            {n1, n2} contains meta_leader
            replicas(p/0) contains isr(p/0)",
        );
        assert_all(
            false,
            "
            replicas(p/0) == [n3, n2, n1]
            replicas(p/0) == {n1, n2}
            replicas(p/0) == isr(p/0)
            isr(p/0) contains n3
            isr(p/0) excludes n1
            isr(p/0) contains {n1, n3}
            isr(p/0) excludes {n2, n3}
            isr(p/0) contains leader(p/1)
            isr(p/0) contains replicas(p/0)",
        );
    }

    #[test]
    fn and_needs_all() {
        assert_all(
            true,
            "leader(p/0) == n1 and isr(p/0) == {n1, n2} and hw(n2, p/0) == 100",
        );
        assert_all(
            false,
            "
            leader(p/0) == n1 and isr(p/0) == {n1, n2, n3}
            leader(p/0) == n2 and hw(n3, p/0) == 1",
        );
    }

    #[test]
    fn eval_errors_name_what_is_missing() {
        let e = |text: &str, v: &View| parse(text).eval(v).unwrap_err();
        let v = view();
        assert_eq!(
            e("leader(p/0) == n1", &View::default()),
            "leader(p/0): metadata not fetched"
        );
        assert_eq!(
            e("hw(n3, p/0) == 1", &v),
            "hw(n3, p/0): no replicas answer from n3"
        );
        assert_eq!(
            e("hw(n2, q/0) == 1", &v),
            "hw(n2, q/0): n2 has no replica of q/0"
        );
        assert_eq!(
            e("isr(p/9) == {}", &v),
            "isr(p/9): partition p/9 is not in the metadata"
        );
        assert_eq!(
            e("isr(q/0) == {}", &v),
            "isr(q/0): partition q/0 is not in the metadata"
        );
        assert_eq!(
            e("local_epoch(n2, p/1) == 1", &v),
            "local_epoch(n2, p/1): no epoch yet"
        );
        assert_eq!(
            e("hits(n2, x) == 0", &v),
            "hits(n2, x): no failpoints answer from n2"
        );
    }

    #[test]
    fn needs_lists_sources() {
        let p = parse("hw(n2, p/0) == leo(n3, p/0) and hits(n1, x) == 0 and hw(n2, p/0) > 1");
        let set = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        let want = Needs {
            metadata: false,
            replicas: set(&["n2", "n3"]),
            failpoints: set(&["n1"]),
        };
        assert_eq!(p.needs(), want);
        let want = Needs {
            metadata: true,
            ..Needs::default()
        };
        assert_eq!(parse("isr(p/0) contains n1").needs(), want);
    }

    #[test]
    fn describe_shows_each_term_once() {
        let text = "leader(p/0)==n2 and isr(p/0) contains leader(p/0) and hw(n3,p/0)>=0 \
                    and controller_epoch > 0";
        let p = parse(text);
        assert_eq!(p.text(), text);
        let want = "leader(p/0) = n1, isr(p/0) = {n1, n2}, \
                    hw(n3, p/0) = ? (no replicas answer from n3), controller_epoch = 3";
        assert_eq!(p.describe(&view()), want);
    }

    #[test]
    fn parse_errors_name_token_and_column() {
        let e = Predicate::parse("hw(n9, p/0) == 1", &nodes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "column 4: unknown node \"n9\" (the cluster has n1, n2, n3)"
        );
        // predicate | column | part of the reason
        let cases = r#"
            | 1 | empty predicate
            leadr(p/0) == n1 | 1 | unknown function "leadr" (known: leader, isr,
            leader(p/0) == n9 | 16 | unknown node "n9" (the cluster has n1, n2, n3; terms without
            isr(p/0) == {n1, n7} | 18 | unknown node "n7" (the cluster has n1, n2, n3)
            leader(p/0, n1) == n1 | 11 | expected ")" in leader(T/P), found "," (too many arguments)
            hw(p/0) == 1 | 4 | expected a node N in hw(N, T/P), found a partition
            hw(n1) == 1 | 6 | expected "," in hw(N, T/P), found ")" (too few arguments)
            leader() == n1 | 8 | expected a partition T/P in leader(T/P), found ")" (too few
            controller () == n1 | 12 | controller takes no arguments
            leader == n1 | 1 | leader needs arguments: leader(T/P)
            leader(p/x) == n1 | 10 | bad partition "p/x": not a number
            leader(p) == n1 | 8 | expected a partition T/P like p/0 in leader(T/P), found "p"
            leader(p/) == n1 | 10 | expected a partition number after "p/", found ")"
            leader(a@b/0) == n1 | 8 | bad topic name "a@b"
            leader(a+b/0) == n1 | 9 | unexpected character '+'
            hits(n1, Bad) == 1 | 10 | bad failpoint name "Bad"
            hits(n1, x@y) == 1 | 10 | bad failpoint name "x@y"
            leader(p/0 == n1 | 12 | expected ")" in leader(T/P), found "=="
            leader(p/0 | 11 | expected ")" in leader(T/P), found the end of the predicate
            leader(p/0) > 3 | 13 | ">" compares ints, but leader(p/0) (a node) is not one
            isr(p/0) == 3 | 10 | cannot compare isr(p/0) (a set) with 3 (an int)
            leader(p/0) == isr(p/0) | 13 | cannot compare leader(p/0) (a node) with isr(p/0) (a set)
            isr(p/0) == [n1, n2] | 10 | isr(p/0) is a set: compare it with a set {..}, not a list
            hits(n1, x) contains n1 | 13 | "contains" needs a set or list on its left, not hits(
            isr(p/0) contains 1 | 10 | "contains" needs a node or a set on its right, not 1 (an int)
            isr(p/0) excludes none | 10 | "excludes none" is meaningless
            n1 == n1 | 4 | n1 == n1 compares two constants
            leader(p/0) == n1 n2 | 19 | expected "and" or the end of the predicate, found "n2"
            leader(p/0) == n1 and | 22 | expected a term or a value, found the end of the predicate
            leader(p/0) = n1 | 13 | unexpected "=" (equality is "==")
            leader(p/0) n1 | 13 | expected an operator after leader(p/0), found "n1"
            isr(p/0) == {n1, n2 | 13 | unterminated set: missing "}"
            replicas(p/0) == [n1 | 18 | unterminated list: missing "]"
            isr(p/0) == {n1 n2} | 17 | expected "," or "}" in the set, found "n2"
            isr(p/0) == {n1,} | 17 | expected a node name in the set, found "}"
            leo(n1, p/0) > 99999999999999999999 | 16 | integer 99999999999999999999 is too large
            leader(é/0) == n1 | 8 | unexpected character 'é'
            leader(p/0) == "é" | 16 | unexpected character '"'"#;
        for case in cases.lines().skip(1) {
            let [text, column, reason] = case.split(" | ").collect::<Vec<_>>()[..] else {
                panic!("bad case {case:?}");
            };
            let e = Predicate::parse(text.trim(), &nodes()).unwrap_err();
            let column: usize = column.parse().unwrap();
            assert_eq!(e.column, column, "{text}: {e}");
            assert!(e.reason.starts_with(reason.trim()), "{text}: {e}");
        }
        // Columns count chars, not bytes (U+00A0 is whitespace, two bytes in UTF-8).
        let e = Predicate::parse("isr(p/0) ==\u{a0}", &nodes()).unwrap_err();
        assert_eq!(e.column, 13);
        assert_eq!(
            Predicate::parse("  ", &nodes()).unwrap_err().to_string(),
            "column 1: empty predicate"
        );
    }
}
