// Package sdktest holds the official SDKs' tests of `retrygate proxy`:
// openai-go and anthropic-sdk-go as clients, through the proxy, to scripted
// seats. It is a module of its own so the SDKs stay out of retrygate's
// dependencies; run it with `go -C rehearse/proxy/sdktest test ./...`.
package sdktest
