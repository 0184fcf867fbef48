//! The OpenAPI 3.1 document of the API, served at [`OPENAPI_PATH`]. Tests check that its
//! paths are exactly [`crate::ROUTES`] and that the server answers each of them.

use axum::Json;
use serde_json::{Value, json};

/// Where the document is served (without authentication).
pub const OPENAPI_PATH: &str = "/openapi.json";

/// `GET /openapi.json`.
pub(crate) async fn serve() -> Json<Value> {
    Json(openapi())
}

fn path_param(name: &str, description: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "description": description,
            "schema": { "type": "string" } })
}

fn query_param(name: &str, description: &str, schema: Value) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description,
            "schema": schema })
}

fn ok(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

fn error_ref() -> Value {
    json!({ "$ref": "#/components/responses/Error" })
}

/// The whole document.
pub fn openapi() -> Value {
    let function = path_param("function", "the function (plugin) name");
    let id = path_param("id", "the job id, FUNCTION:N");
    let job = json!({ "$ref": "#/components/schemas/Job" });
    let errors = json!({ "400": error_ref(), "401": error_ref(), "404": error_ref(),
                         "503": error_ref() });
    let with = |mut responses: Value, extra: Value| {
        if let (Some(all), Some(extra)) = (responses.as_object_mut(), extra.as_object()) {
            for (code, response) in extra {
                all.insert(code.clone(), response.clone());
            }
        }
        responses
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "wasmgear HTTP API",
            "version": "1",
            "description": "Enqueue jobs, follow them and operate the queue over HTTP \
                (`wasmgear serve`). Errors are {\"error\": {\"class\", \"message\", \"exit_code\"}} \
                with the CLI's classes: bad_input (400, 413, 415), unauthorized (401), \
                not_found (404), unreachable (503), failed (500)."
        },
        "security": [ { "bearer": [] } ],
        "paths": {
            "/v1/functions/{function}/jobs": { "post": {
                "summary": "Enqueue one job",
                "parameters": [ function ],
                "requestBody": { "required": true, "content": { "application/json": {
                    "schema": { "$ref": "#/components/schemas/JobRequest" } } } },
                "responses": with(errors.clone(), json!({
                    "201": ok("the job's id; created is false when its uniq key returned an unfinished job",
                        json!({ "$ref": "#/components/schemas/Enqueued" })),
                    "413": error_ref(), "415": error_ref() }))
            } },
            "/v1/functions/{function}/bulk": { "post": {
                "summary": "Enqueue many jobs of one function in one atomic call (all or none)",
                "parameters": [ function ],
                "requestBody": { "required": true, "content": { "application/json": {
                    "schema": { "type": "object", "required": ["jobs"], "properties": {
                        "jobs": { "type": "array", "maxItems": crate::api::MAX_BULK_JOBS,
                                  "items": { "$ref": "#/components/schemas/JobRequest" } } } } } } },
                "responses": with(errors.clone(), json!({
                    "201": ok("the jobs' ids, in order", json!({ "type": "object", "properties": {
                        "jobs": { "type": "array", "items": { "$ref": "#/components/schemas/Enqueued" } } } })),
                    "413": error_ref(), "415": error_ref() }))
            } },
            "/v1/jobs/{id}": { "get": {
                "summary": "A job's state, progress, error and output",
                "parameters": [ id ],
                "responses": with(errors.clone(), json!({ "200": ok("the job", job.clone()) }))
            } },
            "/v1/jobs/{id}/wait": { "get": {
                "summary": "Wait for a job to end (long poll)",
                "parameters": [ id, query_param("timeout_ms", "how long to wait (default 30000, at most 300000)",
                    json!({ "type": "integer", "minimum": 0 })) ],
                "responses": with(errors.clone(), json!({
                    "200": ok("the job, ended", job.clone()),
                    "202": ok("the job as it is: it had not ended when the timeout passed; ask again", job.clone()) }))
            } },
            "/v1/jobs/{id}/logs": { "get": {
                "summary": "A job's log: each attempt's log lines, stdout and stderr",
                "parameters": [ id ],
                "responses": with(errors.clone(), json!({ "200": { "description": "the log",
                    "content": { "text/plain": { "schema": { "type": "string" } } } } }))
            } },
            "/v1/jobs/{id}/cancel": { "post": {
                "summary": "Cancel a job: a waiting one at once, a running one by asking its worker",
                "parameters": [ id ],
                "responses": with(errors.clone(), json!({ "200": ok("what happened", json!({
                    "type": "object", "properties": {
                        "outcome": { "enum": ["cancelled", "stopping", "already-ended"] },
                        "state": { "type": "string" } } })) }))
            } },
            "/v1/jobs/{id}/retry": { "post": {
                "summary": "Run a failed or cancelled job again",
                "parameters": [ id ],
                "responses": with(errors.clone(), json!({ "200": ok("retried", json!({
                    "type": "object", "properties": { "retried": { "type": "boolean" } } })) }))
            } },
            "/v1/events": { "get": {
                "summary": "Server-Sent Events of one function or of all: create, start, progress, retry, finish, ready, config, cancel",
                "parameters": [ query_param("function", "only this function's events", json!({ "type": "string" })) ],
                "responses": with(errors.clone(), json!({ "200": { "description": "an event stream; each event's data is its JSON with `function` added",
                    "content": { "text/event-stream": { "schema": { "type": "string" } } } } }))
            } },
            "/v1/queues": { "get": {
                "summary": "Every function's jobs per state, live workers, paused or not",
                "responses": with(errors.clone(), json!({ "200": ok("one entry per function",
                    json!({ "type": "array", "items": { "type": "object" } })) }))
            } },
            "/v1/workers": { "get": {
                "summary": "The live workers and what they advertise",
                "responses": with(errors.clone(), json!({ "200": ok("one entry per worker",
                    json!({ "type": "array", "items": { "type": "object" } })) }))
            } },
            "/v1/failures": { "get": {
                "summary": "Failure groups (error classes) with their counts",
                "parameters": [ query_param("function", "only this function's groups", json!({ "type": "string" })) ],
                "responses": with(errors.clone(), json!({ "200": ok("one entry per function and group",
                    json!({ "type": "array", "items": { "type": "object", "properties": {
                        "function": { "type": "string" }, "group": { "type": "string" },
                        "count": { "type": "integer" } } } })) }))
            } },
            "/metrics": { "get": {
                "summary": "Prometheus metrics (text format 0.0.4): jobs per function and state, paused functions, live workers, the server's requests",
                "responses": with(errors.clone(), json!({ "200": { "description": "the metrics",
                    "content": { "text/plain": { "schema": { "type": "string" } } } } }))
            } },
            "/healthz": { "get": {
                "summary": "The process is up (no authentication)",
                "security": [],
                "responses": { "200": ok("up", json!({ "type": "object" })) }
            } },
            "/readyz": { "get": {
                "summary": "Redis answers PING within 2 s (no authentication)",
                "security": [],
                "responses": { "200": ok("ready", json!({ "type": "object" })),
                               "503": ok("not ready, with the reason", json!({ "type": "object" })) }
            } },
            "/v1/functions/{function}/stats": { "get": {
                "summary": "A function's statistics for one day: wait and run times, failures, retries",
                "parameters": [ function, query_param("day", "YYYY-MM-DD (UTC); today by default", json!({ "type": "string" })) ],
                "responses": with(errors, json!({ "200": ok("the day's statistics", json!({ "type": "object" })) }))
            } }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "responses": { "Error": { "description": "an error", "content": { "application/json": {
                "schema": { "type": "object", "properties": { "error": { "type": "object", "properties": {
                    "class": { "enum": ["bad_input", "unauthorized", "not_found", "unreachable", "timed_out", "failed"] },
                    "message": { "type": "string" },
                    "exit_code": { "type": "integer" } } } } } } } } },
            "schemas": {
                "JobRequest": { "type": "object", "additionalProperties": false, "properties": {
                    "input": { "type": "string", "description": "the input as text" },
                    "input_base64": { "type": "string", "description": "the input as base64 bytes" },
                    "input_json": { "description": "the input as JSON (the job gets its compact text)" },
                    "priority": { "type": "integer", "minimum": -1000, "maximum": 1000 },
                    "delay_ms": { "type": "integer", "minimum": 0 },
                    "at_ms": { "type": "integer", "description": "ms since the epoch; not in the past" },
                    "attempts": { "type": "integer", "minimum": 1, "maximum": 1000 },
                    "timeout_ms": { "type": "integer", "minimum": 1 },
                    "retention_ms": { "type": "integer", "minimum": 1000 },
                    "failed_retention_ms": { "type": "integer", "minimum": 0 },
                    "uniq": { "type": "string" },
                    "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 32 },
                    "after": { "type": "array", "items": { "type": "string" }, "maxItems": 100 } } },
                "Enqueued": { "type": "object", "properties": {
                    "id": { "type": "string" }, "created": { "type": "boolean" } } },
                "Job": { "type": "object", "description": "the job record's fields (PROTOCOL.md, \"The job record\"), its id, and for a succeeded job output_base64 and, when UTF-8, output",
                    "properties": { "id": { "type": "string" }, "state": { "type": "string" },
                        "output": { "type": "string" }, "output_base64": { "type": "string" } } }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    /// The document lists exactly the routes the router has.
    #[test]
    fn the_document_lists_every_route() {
        let doc = super::openapi();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, operations) in doc["paths"].as_object().unwrap() {
            for method in operations.as_object().unwrap().keys() {
                documented.push((method.to_uppercase(), path.clone()));
            }
        }
        let mut routes: Vec<(String, String)> = crate::ROUTES
            .iter()
            .map(|(m, p)| (m.to_uppercase(), p.to_string()))
            .collect();
        documented.sort();
        routes.sort();
        assert_eq!(documented, routes);
    }
}
