// Package script reads script seats: YAML files of deterministic steps
// that a rehearsal plays on the virtual clock, or `seat serve` over HTTP.
//
// A script is a seat.Planner. Call n (0-based, counted across every job
// that uses the seat) gets step n's plan, with repeats expanded; seat.Resolve
// turns a plan into what a client with a hard timeout and a wait cap would
// observe. A 45-second script thus runs in microseconds, with the same
// numbers every time.
//
// # Grammar
//
// A script is one YAML document: a mapping with these keys.
//
//	name   string   optional; default: the file's base name without .yaml
//	model  string   optional; the model name written to the log
//	then   loop|last what happens after the last step: loop (default)
//	                starts again at the first; last repeats the last step
//	steps  list     required, at least one step
//
// A step is a mapping. Every key is optional; `{}` is an instant 200 with
// no tokens.
//
//	wait              duration  submit → first content byte (default 0)
//	ttfb              duration  submit → response headers; default = wait;
//	                            must be <= wait
//	elapsed           duration  submit → last byte; must be >= wait;
//	                            default = wait (a reset step: reset_after)
//	rate              number    completion tokens per second, instead of
//	                            elapsed: elapsed = wait + completion_tokens/rate
//	prompt_tokens     integer   >= 0
//	completion_tokens integer   >= 0
//	cached_tokens     integer   the part of prompt_tokens read from the
//	                            provider's prompt cache (reported only
//	                            when given, as a provider reports it)
//	cache_write_tokens integer  the part of prompt_tokens written to the
//	                            cache; with cached_tokens at most prompt_tokens
//	reasoning_tokens  integer   the part of completion_tokens spent reasoning
//	usage             bool      default true; false: the response carries
//	                            no usage field (an HTTP client must count)
//	status            integer   200 (default) or an error status 400-599;
//	                            an error's headers and body arrive at elapsed
//	retry_after       duration  the response's Retry-After
//	ratelimit_remaining_requests integer  the provider's rate-limit state on
//	ratelimit_remaining_tokens   integer  the answer: requests and tokens left,
//	ratelimit_reset              duration and when the limit resets (seat
//	                            serve writes each API's own headers)
//	error             string    the provider's error code, e.g.
//	                            context_length_exceeded, insufficient_quota,
//	                            content_filter, overloaded_error,
//	                            rate_limit_exceeded; with status 200 it is an
//	                            error event inside the stream
//	incomplete        string    the reason a 200 answer ended short
//	                            (max_output_tokens, content_filter): it
//	                            streams to its end, then ends incomplete
//	                            (the Responses API's status incomplete).
//	                            Not with status, error or reset_after
//	hang              bool      never returns. Without wait nothing ever
//	                            arrives (Plan.Wait = Never); with wait, the
//	                            first chunk arrives and the stream stalls.
//	                            Not with elapsed, rate, status, retry_after
//	                            or error
//	reset_after       duration  > 0: the connection drops at this point,
//	                            which must be <= elapsed (equal: the last
//	                            byte never arrives); also ends a hang
//	conn_error        bool      the connection is refused; only repeat may
//	                            go with it
//	repeat            integer   >= 1 (default 1): the step serves that many
//	                            consecutive calls
//
// Durations take Go syntax ("1.2s", "1500ms", "1m30s") or a bare number of
// seconds (1.2); they must be finite, non-negative and at most 24h. Token
// counts are whole decimal numbers up to 1e9; rate is a positive number.
// Booleans are true or false. Anchors and aliases may repeat a step
// (`- &ok {...}` then `- *ok`); merge keys (<<) are not supported.
//
// Outcomes follow from the step and the client's limits (seat.Resolve):
// status 200 and no error is ok; 429 or rate_limit_exceeded is
// rate_limited; other 4xx (but 408) and permanent codes (context_length_exceeded,
// content_filter, insufficient_quota, ...) are client_error; 5xx and
// overloaded_error are server_error (ambiguous when slower than
// slow_5xx_after); reset_after is reset; hang ends in timeout, or in
// wait_cap when nothing arrived within the wait cap; conn_error is
// conn_error; incomplete is incomplete (billable, never retried).
//
// # Errors
//
// Every error names file:line and the key at fault, with steps counted
// from 0:
//
//	bad-day.yaml:12: steps[3].wait: negative duration "-1s"
//
// Unknown or duplicate keys, wrong types, negative, NaN or infinite
// values, elapsed before wait, ttfb after wait, rate together with
// elapsed, a reset after the end, repeat < 1, a missing or empty steps
// list and malformed YAML are all errors; no input makes Parse panic.
//
// # Example
//
//	# seed 003's two attempts
//	name: seed003
//	steps:
//	  - {wait: 1.2s, elapsed: 7.2s, reset_after: 7.2s, prompt_tokens: 1500, completion_tokens: 600}
//	  - {wait: 18s, elapsed: 27s, prompt_tokens: 1500, completion_tokens: 900}
//
// Built-in scripts (BuiltinNames) are embedded in the binary; seed003 is
// the demo `retrygate rehearse` runs with no config.
package script
