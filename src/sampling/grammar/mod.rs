//! Grammar-constrained sampling: GBNF grammars as llama.cpp defines them, compiled to rules over
//! UTF-8 bytes, and a matcher that masks every token whose bytes cannot continue the grammar.
//!
//! - [`Grammar::parse`] reads GBNF text (errors name the rule and the line:column);
//! - [`Matcher`] follows one generation: the set of parse stacks after the text so far, kept as
//!   hash-consed persistent stacks so that states repeat and their byte transitions can be
//!   cached (a lazily built DFA over stack sets);
//! - [`TokenTrie`] holds the vocabulary's byte strings as a prefix tree walked once per mask,
//!   skipping every subtree whose prefix the grammar rejects;
//! - [`json_schema`] turns a JSON schema into GBNF text.
//!
//! Owns nothing about logits or the sampler chain (that is `sampling`).

mod compile;
pub mod json_schema;
mod matcher;
mod parse;
mod trie;

pub use compile::{ByteSet, Elem, Grammar, Rule};
pub use matcher::{Matcher, MAX_STACKS};
pub use parse::GrammarError;
pub use trie::TokenTrie;

/// llama.cpp's generic JSON grammar (`grammars/json.gbnf`): any JSON object at the top.
pub const JSON_OBJECT_GBNF: &str = r#"root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
"#;
