//! Alert rules: configuration as users write it, validated and compiled at start.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use weir_core::jq::{Filter, FilterError};

/// What a rule measures over its window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Aggregate {
    /// Events in the window.
    Count,
    /// Share of events with `success == false`.
    ErrorRate,
    /// Events with this `errorCode`.
    ErrorCode(String),
    /// Median of `durationMs`.
    P50,
    /// 95th percentile of `durationMs`.
    P95,
    /// 99th percentile of `durationMs`.
    P99,
}

/// A rule as written in the config.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Unique name.
    pub name: String,
    /// jq predicate; only events for which it is truthy count.
    #[serde(default)]
    pub filter: Option<String>,
    /// jq paths whose values form the group, e.g. `[".tenantId", ".toolName"]`.
    #[serde(default)]
    pub group_by: Vec<String>,
    /// Window length, e.g. `1m`.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
    /// Slide: evaluate a window of `window` every `every` (absent: tumbling windows).
    #[serde(default, with = "humantime_serde")]
    pub every: Option<Duration>,
    /// What to measure.
    pub aggregate: Aggregate,
    /// When to fire, e.g. `> 0.05` (operators `>`, `>=`, `<`, `<=`, `==`, `!=`).
    pub condition: String,
    /// Fewest events in the window before the rule may fire.
    #[serde(default = "one")]
    pub min_events: u64,
    /// While the condition holds, repeat the alert this often.
    #[serde(default = "five_minutes", with = "humantime_serde")]
    pub cooldown: Duration,
}

fn one() -> u64 {
    1
}
fn five_minutes() -> Duration {
    Duration::from_secs(300)
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Condition {
    /// The operator.
    pub op: Op,
    /// The threshold.
    pub threshold: f64,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl Op {
    /// The operator's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Gt => ">",
            Op::Ge => ">=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Eq => "==",
            Op::Ne => "!=",
        }
    }
}

impl Condition {
    /// Parses `> 0.05`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let (op, rest) = [(">=", Op::Ge), ("<=", Op::Le), ("==", Op::Eq), ("!=", Op::Ne), (">", Op::Gt), ("<", Op::Lt)]
            .iter()
            .find_map(|(s, op)| t.strip_prefix(s).map(|r| (*op, r)))
            .ok_or_else(|| format!("{text:?} must start with >, >=, <, <=, == or !="))?;
        let threshold =
            rest.trim().parse::<f64>().map_err(|_| format!("{text:?}: {:?} is not a number", rest.trim()))?;
        if !threshold.is_finite() {
            return Err(format!("{text:?}: the threshold must be finite"));
        }
        Ok(Self { op, threshold })
    }

    /// Whether `value` satisfies it.
    pub fn holds(&self, value: f64) -> bool {
        match self.op {
            Op::Gt => value > self.threshold,
            Op::Ge => value >= self.threshold,
            Op::Lt => value < self.threshold,
            Op::Le => value <= self.threshold,
            Op::Eq => value == self.threshold,
            Op::Ne => value != self.threshold,
        }
    }
}

/// A validated rule.
#[derive(Debug)]
pub struct Rule {
    /// Name.
    pub name: String,
    /// Compiled filter.
    pub filter: Option<Filter>,
    /// Compiled group paths.
    pub group_by: Vec<Filter>,
    /// Window length.
    pub window: Duration,
    /// Evaluation step (the window for tumbling windows).
    pub every: Duration,
    /// What to measure.
    pub aggregate: Aggregate,
    /// When to fire.
    pub condition: Condition,
    /// Fewest events.
    pub min_events: u64,
    /// Repeat interval.
    pub cooldown: Duration,
}

/// A rule that cannot run.
#[derive(Debug, Clone, thiserror::Error)]
#[error("rule {rule:?}: {field}: {message}")]
pub struct RuleError {
    /// The rule's name.
    pub rule: String,
    /// The field.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl Rule {
    /// Validates and compiles a rule.
    pub fn compile(c: &RuleConfig) -> Result<Self, RuleError> {
        let fail = |field: &str, message: String| RuleError { rule: c.name.clone(), field: field.into(), message };
        if c.name.trim().is_empty() {
            return Err(fail("name", "must not be empty".into()));
        }
        let jq = |field: &str, src: &str| Filter::compile(src).map_err(|e: FilterError| fail(field, e.to_string()));
        let filter = c.filter.as_deref().map(|f| jq("filter", f)).transpose()?;
        let group_by =
            c.group_by.iter().enumerate().map(|(i, p)| jq(&format!("group_by[{i}]"), p)).collect::<Result<_, _>>()?;
        let ms = |d: Duration| d.as_millis();
        if c.window.is_zero() || ms(c.window) % 1000 != 0 {
            return Err(fail("window", format!("{:?} must be a positive whole number of seconds", c.window)));
        }
        let every = c.every.unwrap_or(c.window);
        if every.is_zero() || every > c.window || ms(c.window) % ms(every) != 0 {
            return Err(fail("every", format!("{every:?} must be positive and divide the window {:?}", c.window)));
        }
        if ms(c.window) / ms(every) > 720 {
            return Err(fail("every", "a window may have at most 720 steps".into()));
        }
        let condition = Condition::parse(&c.condition).map_err(|m| fail("condition", m))?;
        if c.min_events == 0 {
            return Err(fail("min_events", "must be at least 1".into()));
        }
        if let Aggregate::ErrorCode(code) = &c.aggregate
            && code.is_empty()
        {
            return Err(fail("aggregate", "error_code needs a code".into()));
        }
        Ok(Self {
            name: c.name.clone(),
            filter,
            group_by,
            window: c.window,
            every,
            aggregate: c.aggregate.clone(),
            condition,
            min_events: c.min_events,
            cooldown: c.cooldown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RuleConfig {
        RuleConfig {
            name: "errors".into(),
            filter: None,
            group_by: vec![".tenantId".into()],
            window: Duration::from_secs(60),
            every: Some(Duration::from_secs(10)),
            aggregate: Aggregate::ErrorRate,
            condition: "> 0.05".into(),
            min_events: 20,
            cooldown: Duration::from_secs(300),
        }
    }

    #[test]
    fn conditions() {
        assert!(Condition::parse("> 0.05").unwrap().holds(0.06));
        assert!(!Condition::parse(">=1").unwrap().holds(0.99));
        assert!(Condition::parse("!= 0").unwrap().holds(2.0));
        assert!(Condition::parse("~ 3").is_err());
        assert!(Condition::parse("> lots").is_err());
    }

    #[test]
    fn errors_name_the_rule_the_field_and_the_position() {
        let mut c = cfg();
        c.filter = Some(".success == ".into());
        let e = Rule::compile(&c).unwrap_err();
        assert_eq!((e.rule.as_str(), e.field.as_str()), ("errors", "filter"));
        assert!(e.message.contains("at character"), "{e}");
        let mut c = cfg();
        c.every = Some(Duration::from_secs(7));
        assert_eq!(Rule::compile(&c).unwrap_err().field, "every");
        let mut c = cfg();
        c.group_by = vec![".a | bogus(".into()];
        assert_eq!(Rule::compile(&c).unwrap_err().field, "group_by[0]");
        let mut c = cfg();
        c.condition = "over 5".into();
        assert_eq!(Rule::compile(&c).unwrap_err().field, "condition");
        assert!(Rule::compile(&cfg()).is_ok());
    }
}
