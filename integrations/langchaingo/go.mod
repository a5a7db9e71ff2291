module github.com/self-improving-loop/selfimprove/integrations/langchaingo

go 1.26.0

require github.com/self-improving-loop/selfimprove v0.1.0

require (
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/pkoukk/tiktoken-go v0.1.6 // indirect
	github.com/tmc/langchaingo v0.1.14
)
