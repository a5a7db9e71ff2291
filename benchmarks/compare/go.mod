module github.com/self-improving-loop/selfimprove/benchmarks/compare

go 1.26.0

require (
	github.com/self-improving-loop/selfimprove v0.1.0
	github.com/sony/gobreaker/v2 v2.4.0
)
