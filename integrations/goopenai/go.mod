module github.com/self-improving-loop/selfimprove/integrations/goopenai

go 1.26.0

require github.com/self-improving-loop/selfimprove v0.1.0

require github.com/sashabaranov/go-openai v1.43.0
