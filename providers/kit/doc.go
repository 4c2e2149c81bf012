// Package kit is what machinist's cloud providers share, so that a provider holds only what is its
// cloud's own: the options every driver takes under the same names (Options, with the HTTP
// transport, the client cache size and the timeouts), the reading of a request's secret and its
// errors (Secret), the SDK clients of a credential set (Clients), the decoding of a class's
// providerSpec (Spec, over driver.DecodeValidSpec), the recording of cloud requests in MCM's
// mcm_cloud_api_* metrics (APIMetrics, over core/cloudmetrics), the error cases every cloud shares
// (Errors), the reachability of a token endpoint (Reach), volume IDs and registration.
//
// A new provider starts on it: `make new-provider NAME=foo` generates one that uses the kit
// (docs/writing-a-provider.md). The fakes the providers are tested against share
// providers/kit/fakekit.
package kit
