//! Typed job input and output: [`FromInput`] decodes the bytes a client enqueued into the
//! handler's input type, [`IntoOutput`] encodes the handler's output into the bytes the client
//! gets back.

use crate::JobError;

/// A type a handler can take as its input: decoded from the job's input bytes.
///
/// Implemented for `Vec<u8>` (the bytes as they are), `String` (UTF-8 text) and, with the
/// `json` feature, `Json<T>`. Input that does not decode fails the job with a
/// [`JobError::fail`] that says why, and the handler is not called.
///
/// Implement it for your own type to give a handler a richer input.
///
/// # Examples
///
/// ```
/// use wasmgear_guest::{FromInput, JobError};
///
/// /// A list of numbers, one per line.
/// struct Lines(Vec<i64>);
///
/// impl FromInput for Lines {
///     fn from_input(input: Vec<u8>) -> Result<Self, JobError> {
///         let text = String::from_input(input)?;
///         let numbers = text
///             .lines()
///             .map(|line| line.trim().parse::<i64>())
///             .collect::<Result<_, _>>()
///             .map_err(|e| JobError::fail(format!("input is not one number per line: {e}")))?;
///         Ok(Lines(numbers))
///     }
/// }
///
/// let Lines(numbers) = Lines::from_input(b"1\n2\n3".to_vec()).unwrap();
/// assert_eq!(numbers, [1, 2, 3]);
/// ```
pub trait FromInput: Sized {
    /// Decodes the job's input bytes.
    fn from_input(input: Vec<u8>) -> Result<Self, JobError>;
}

/// A type a handler can return as its output: encoded into the job's output bytes.
///
/// Implemented for `Vec<u8>` (the bytes as they are), `String` (UTF-8 text), `()` (no output:
/// zero bytes) and, with the `json` feature, `Json<T>`. An output that does not
/// encode fails the job with a [`JobError::fail`].
///
/// # Examples
///
/// ```
/// use wasmgear_guest::{IntoOutput, JobError};
///
/// /// Width and height, written as `WxH`.
/// struct Size(u32, u32);
///
/// impl IntoOutput for Size {
///     fn into_output(self) -> Result<Vec<u8>, JobError> {
///         format!("{}x{}", self.0, self.1).into_output()
///     }
/// }
///
/// assert_eq!(Size(640, 480).into_output().unwrap(), b"640x480");
/// ```
pub trait IntoOutput {
    /// Encodes the output into bytes.
    fn into_output(self) -> Result<Vec<u8>, JobError>;
}

/// The input bytes, untouched.
///
/// ```
/// use wasmgear_guest::FromInput;
///
/// assert_eq!(Vec::<u8>::from_input(vec![0, 255]).unwrap(), [0, 255]);
/// ```
impl FromInput for Vec<u8> {
    fn from_input(input: Vec<u8>) -> Result<Self, JobError> {
        Ok(input)
    }
}

/// The input as UTF-8 text; any other bytes fail the job.
///
/// ```
/// use wasmgear_guest::FromInput;
///
/// assert_eq!(String::from_input(b"hello".to_vec()).unwrap(), "hello");
/// let err = String::from_input(vec![b'h', 0xff]).unwrap_err();
/// assert!(err.message().starts_with("input is not valid UTF-8 text"));
/// ```
impl FromInput for String {
    fn from_input(input: Vec<u8>) -> Result<Self, JobError> {
        String::from_utf8(input).map_err(|e| {
            JobError::fail(format!(
                "input is not valid UTF-8 text: {} (the input has {} bytes)",
                e.utf8_error(),
                e.as_bytes().len()
            ))
        })
    }
}

/// The output bytes, untouched.
///
/// ```
/// use wasmgear_guest::IntoOutput;
///
/// assert_eq!(vec![1u8, 2].into_output().unwrap(), [1, 2]);
/// ```
impl IntoOutput for Vec<u8> {
    fn into_output(self) -> Result<Vec<u8>, JobError> {
        Ok(self)
    }
}

/// The text's UTF-8 bytes.
///
/// ```
/// use wasmgear_guest::IntoOutput;
///
/// assert_eq!("done".to_string().into_output().unwrap(), b"done");
/// ```
impl IntoOutput for String {
    fn into_output(self) -> Result<Vec<u8>, JobError> {
        Ok(self.into_bytes())
    }
}

/// No output: the job succeeds with zero bytes.
///
/// ```
/// use wasmgear_guest::IntoOutput;
///
/// assert!(().into_output().unwrap().is_empty());
/// ```
impl IntoOutput for () {
    fn into_output(self) -> Result<Vec<u8>, JobError> {
        Ok(Vec::new())
    }
}

#[cfg(feature = "json")]
pub use json::Json;

#[cfg(feature = "json")]
mod json {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use super::{FromInput, IntoOutput};
    use crate::JobError;

    /// Job input or output as JSON (feature `json`): as an input, the job's bytes are parsed
    /// into a `T: Deserialize`; as an output, the `T: Serialize` is written as compact JSON.
    ///
    /// Input that is not JSON of the expected shape fails the job, with serde's account of
    /// where and why in the message.
    ///
    /// # Examples
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use wasmgear_guest::{Job, JobError, Json};
    ///
    /// #[derive(Deserialize)]
    /// struct Resize {
    ///     width: u32,
    ///     height: u32,
    /// }
    ///
    /// #[derive(Serialize)]
    /// struct Area {
    ///     pixels: u64,
    /// }
    ///
    /// fn area(_job: &Job, Json(req): Json<Resize>) -> Result<Json<Area>, JobError> {
    ///     Ok(Json(Area { pixels: u64::from(req.width) * u64::from(req.height) }))
    /// }
    ///
    /// wasmgear_guest::job!(area);
    /// # fn main() {
    /// # use wasmgear_guest::{FromInput, IntoOutput};
    /// # let job = Job::new("a:1", "area");
    /// # let input = Json::from_input(br#"{"width":640,"height":480}"#.to_vec()).unwrap();
    /// # let output = area(&job, input).unwrap().into_output().unwrap();
    /// # assert_eq!(output, br#"{"pixels":307200}"#);
    /// # }
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
    pub struct Json<T>(pub T);

    impl<T: DeserializeOwned> FromInput for Json<T> {
        fn from_input(input: Vec<u8>) -> Result<Self, JobError> {
            serde_json::from_slice(&input).map(Json).map_err(|e| {
                JobError::fail(format!(
                    "input is not valid JSON for {}: {e}",
                    std::any::type_name::<T>()
                ))
            })
        }
    }

    impl<T: Serialize> IntoOutput for Json<T> {
        fn into_output(self) -> Result<Vec<u8>, JobError> {
            serde_json::to_vec(&self.0).map_err(|e| {
                JobError::fail(format!(
                    "output of type {} cannot be written as JSON: {e}",
                    std::any::type_name::<T>()
                ))
            })
        }
    }

    impl<T> std::ops::Deref for Json<T> {
        type Target = T;

        fn deref(&self) -> &T {
            &self.0
        }
    }

    impl<T> std::ops::DerefMut for Json<T> {
        fn deref_mut(&mut self) -> &mut T {
            &mut self.0
        }
    }

    #[cfg(test)]
    mod tests {
        use std::collections::BTreeMap;

        use serde::{Deserialize, Serialize};

        use super::*;

        #[derive(Debug, PartialEq, Deserialize, Serialize)]
        struct Point {
            x: i32,
            y: i32,
        }

        #[test]
        fn json_input_parses() {
            let Json(p) = Json::<Point>::from_input(br#"{"x":1,"y":-2}"#.to_vec()).unwrap();
            assert_eq!(p, Point { x: 1, y: -2 });
        }

        #[test]
        fn json_input_of_the_wrong_shape_fails_with_where_and_why() {
            let err = Json::<Point>::from_input(br#"{"x":1}"#.to_vec()).unwrap_err();
            assert!(!err.is_retry());
            assert!(
                err.message().contains("input is not valid JSON for"),
                "{err}"
            );
            assert!(err.message().contains("Point"), "{err}");
            assert!(err.message().contains("missing field `y`"), "{err}");

            let err = Json::<Point>::from_input(b"not json".to_vec()).unwrap_err();
            assert!(err.message().contains("at line 1 column"), "{err}");
        }

        #[test]
        fn json_output_is_compact() {
            let out = Json(Point { x: 3, y: 4 }).into_output().unwrap();
            assert_eq!(out, br#"{"x":3,"y":4}"#);
        }

        #[test]
        fn unserializable_output_fails() {
            // JSON object keys must be strings.
            let map = BTreeMap::from([((1, 2), "pair")]);
            let err = Json(map).into_output().unwrap_err();
            assert!(!err.is_retry());
            assert!(err.message().contains("cannot be written as JSON"), "{err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_pass_through() {
        let bytes = vec![0, 1, 254, 255];
        assert_eq!(Vec::<u8>::from_input(bytes.clone()).unwrap(), bytes);
        assert_eq!(bytes.clone().into_output().unwrap(), bytes);
    }

    #[test]
    fn text_round_trips() {
        let text = String::from_input("grüße, 世界".as_bytes().to_vec()).unwrap();
        assert_eq!(text, "grüße, 世界");
        assert_eq!(text.into_output().unwrap(), "grüße, 世界".as_bytes());
    }

    #[test]
    fn invalid_utf8_fails_with_a_clear_message() {
        let err = String::from_input(vec![b'o', b'k', 0xc3, 0x28]).unwrap_err();
        assert!(!err.is_retry());
        assert_eq!(
            err.message(),
            "input is not valid UTF-8 text: invalid utf-8 sequence of 1 bytes from index 2 \
             (the input has 4 bytes)"
        );
    }

    #[test]
    fn empty_input_is_empty_text() {
        assert_eq!(String::from_input(Vec::new()).unwrap(), "");
    }

    #[test]
    fn unit_output_is_empty() {
        assert_eq!(().into_output().unwrap(), Vec::<u8>::new());
    }
}
