package failure_test

import "testing"

// TestScrubWebhooks: a webhook URL is itself the credential. Its secret
// part goes, and the host (and the path before it) stays readable.
func TestScrubWebhooks(t *testing.T) {
	checkScrub(t, []struct{ name, in, want string }{
		{"slack incoming webhook", `Post "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/abcDEF123ghiJKL456mnoPQR": dial tcp: i/o timeout`, `Post "https://hooks.slack.com/services/<redacted>": dial tcp: i/o timeout`},
		{"slack workflow webhook", "Post https://hooks.slack.com/triggers/T0123ABCD/6123456789012/abcDEF123ghiJKL456mnoPQR: EOF", "Post https://hooks.slack.com/triggers/<redacted>: EOF"},
		{"discord webhook", `Post "https://discord.com/api/webhooks/1234567890123456789/Xk3_9fQwZ-LmN0pRt7sUvY2aBcD4eFgH5iJkL6mNoP8qRsT1uVwX-yZ0aB_cD3eF4gHi?wait=true": EOF`, `Post "https://discord.com/api/webhooks/<redacted>?wait=true": EOF`},
		{"discordapp webhook with an api version", "Post https://discordapp.com/api/v10/webhooks/1234567890123456789/a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8s9t0u1v2w3x4y5z6a7b8c9d0e1f2g3h4i5j6 failed", "Post https://discordapp.com/api/v10/webhooks/<redacted> failed"},
		{"teams incoming webhook", `Post "https://contoso.webhook.office.com/webhookb2/5d8b2a1e-3c4f-4e7a-9b1d-2f6c8e0a4b7d@72f988bf-86f1-41af-91ab-2d7cd011db47/IncomingWebhook/0123456789abcdef0123456789abcdef/8e2d4c6a-1b3f-4a5d-9c7e-0f2b4d6a8c1e/V2aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789aBcDeF": 400`, `Post "https://contoso.webhook.office.com/webhookb2/<redacted>": 400`},
		{"power automate webhook", `Post "https://prod-12.westus.logic.azure.com:443/workflows/0123456789abcdef0123456789abcdef/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdEFG": 401`, `Post "https://prod-12.westus.logic.azure.com:443/workflows/<redacted>/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=<redacted>": 401`},
		{"zapier catch hook", `Post "https://hooks.zapier.com/hooks/catch/123456/abcdef/": EOF`, `Post "https://hooks.zapier.com/hooks/catch/<redacted>": EOF`},
		{"zapier hook, silent", "Post https://hooks.zapier.com/hooks/catch/1234567/b8xk2p9/silent/ failed", "Post https://hooks.zapier.com/hooks/catch/<redacted> failed"},
		{"ifttt maker webhook", `Post "https://maker.ifttt.com/trigger/deploy_done/with/key/dZx9Pq2Lm4Kj7Hg1Fd3Sa5Qw": EOF`, `Post "https://maker.ifttt.com/trigger/deploy_done/with/key/<redacted>": EOF`},
		{"ifttt maker webhook, json", "Post https://maker.ifttt.com/trigger/deploy-done/json/with/key/dZx9Pq2Lm4Kj7Hg1Fd3Sa5Qw?x=1: 401", "Post https://maker.ifttt.com/trigger/deploy-done/json/with/key/<redacted>?x=1: 401"},
		{"ifttt key page", "GET https://maker.ifttt.com/use/dZx9Pq2Lm4Kj7Hg1Fd3Sa5Qw: 200", "GET https://maker.ifttt.com/use/<redacted>: 200"},
		{"an ifttt page stays", "GET https://ifttt.com/maker_webhooks/settings: 200", "GET https://ifttt.com/maker_webhooks/settings: 200"},
		{"mattermost webhook", `Post "https://chat.example.com/hooks/xi4q9yc7rtrnpkjmm4b5bgrswc": EOF`, `Post "https://chat.example.com/hooks/<redacted>": EOF`},
		{"google chat webhook", `Post "https://chat.googleapis.com/v1/spaces/AAAAbCdEfGh/messages?key=AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI&token=qW3rTy8uIoP1aSdFgHjKl2ZxCvBnM4QwErTyUiOp5As%3D": EOF`, `Post "https://chat.googleapis.com/v1/spaces/AAAAbCdEfGh/messages?key=<redacted>&token=<redacted>": EOF`},
		{"an api url stays", `Post "https://api.openai.com/v1/chat/completions": context deadline exceeded`, `Post "https://api.openai.com/v1/chat/completions": context deadline exceeded`},
		{"a hooks host stays", "GET https://hooks.example.com/health: 503", "GET https://hooks.example.com/health: 503"},
		{"a hooks path stays", "GET https://example.com/hooks/health and /repos/o/r/hooks/12345678: 404", "GET https://example.com/hooks/health and /repos/o/r/hooks/12345678: 404"},
		{"a slack page stays", "GET https://api.slack.com/messaging/webhooks: 200", "GET https://api.slack.com/messaging/webhooks: 200"},
	})
}
