//! `sum`: adds up numbers, with typed JSON input and output (the SDK's `json` feature).
//!
//! Input `{"numbers": [1, 2, 3.5]}`, output `{"sum": 6.5}`. When every number is an integer
//! and the total fits an `i64`, the sum is exact and written as an integer (`{"sum": 6}`);
//! otherwise it is a float. Input that is not of that shape fails the job for good, with
//! serde's account of what is wrong; so does a sum too large for a float.

use serde::{Deserialize, Serialize};
use serde_json::Number;
use wasmgear_guest::{Job, JobError, Json, debug};

/// The job's input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Numbers {
    /// What to add up.
    numbers: Vec<Number>,
}

/// The job's output.
#[derive(Debug, Serialize)]
struct Sum {
    /// The total of the numbers (0 for none).
    sum: Number,
}

/// Adds `numbers` exactly as integers when it can, as floats otherwise.
fn total(numbers: &[Number]) -> Result<Number, JobError> {
    let exact = numbers
        .iter()
        .try_fold(0i64, |sum, n| n.as_i64().and_then(|n| sum.checked_add(n)));
    if let Some(sum) = exact {
        return Ok(Number::from(sum));
    }
    let sum: f64 = numbers.iter().filter_map(Number::as_f64).sum();
    Number::from_f64(sum).ok_or_else(|| JobError::fail(format!("the sum is not finite ({sum})")))
}

/// Sums the input's numbers.
fn sum(_job: &Job, Json(input): Json<Numbers>) -> Result<Json<Sum>, JobError> {
    debug!("adding {} numbers", input.numbers.len());
    Ok(Json(Sum {
        sum: total(&input.numbers)?,
    }))
}

wasmgear_guest::job!(sum);

#[cfg(test)]
mod tests {
    use wasmgear_guest::{FromInput, IntoOutput};

    use super::*;

    fn run(input: &str) -> Result<String, JobError> {
        let Json(numbers) = Json::<Numbers>::from_input(input.as_bytes().to_vec())?;
        let sum = Sum {
            sum: total(&numbers.numbers)?,
        };
        Ok(String::from_utf8(Json(sum).into_output()?).unwrap())
    }

    #[test]
    fn integers_sum_exactly() {
        assert_eq!(run(r#"{"numbers":[1,2,3]}"#).unwrap(), r#"{"sum":6}"#);
        assert_eq!(run(r#"{"numbers":[]}"#).unwrap(), r#"{"sum":0}"#);
        assert_eq!(run(r#"{"numbers":[-5,2]}"#).unwrap(), r#"{"sum":-3}"#);
    }

    #[test]
    fn floats_and_overflow_sum_as_floats() {
        assert_eq!(run(r#"{"numbers":[1,2.5]}"#).unwrap(), r#"{"sum":3.5}"#);
        let big = format!(r#"{{"numbers":[{},1]}}"#, i64::MAX);
        let out: serde_json::Value = serde_json::from_str(&run(&big).unwrap()).unwrap();
        assert!(out["sum"].is_f64(), "{out}");
        assert_eq!(out["sum"].as_f64(), Some(i64::MAX as f64 + 1.0));
    }

    #[test]
    fn infinite_sum_fails() {
        let err = run(r#"{"numbers":[1e308,1e308]}"#).unwrap_err();
        assert!(err.message().contains("not finite"), "{err}");
    }

    #[test]
    fn wrong_shape_fails() {
        let err = run(r#"{"numbers":["one"]}"#).unwrap_err();
        assert!(!err.is_retry());
        assert!(
            err.message().starts_with("input is not valid JSON"),
            "{err}"
        );
        assert!(run(r#"{"nums":[1]}"#).is_err());
    }
}
