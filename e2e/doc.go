// Package e2e holds end-to-end tests of the operator surface against real
// third-party clients: the Prometheus text parser reads /metrics, and
// headless Chromium (driven by chromedp) uses the dashboard.
package e2e
