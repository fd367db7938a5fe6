// Package sdktest holds tests that judge retrygate's wire formats with
// the providers' official SDKs. It is its own module, so the SDKs stay
// out of retrygate's build graph; one package per area (seatserver, …).
//
//	go -C rehearse/sdktest test ./...
package sdktest
