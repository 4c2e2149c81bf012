// Package fakekit is the shape every fake cloud of machinist shares (providers/<p>/fake<p>), so
// that a fake holds only its cloud's protocol and state:
//
//   - a constructor with options: fake<p>.New(fake<p>.Options{...}) *Cloud, the zero Options a
//     cloud ready to use;
//   - Serve on a listener: (*Cloud).Serve(l, wrap) (*fakekit.Server, error), over HTTP or over
//     HTTPS with a CA of its own (ServeTLS) where the cloud's SDK insists on TLS; wrap, when set,
//     wraps the handler (`machinist fakecloud` observes requests with it);
//   - a state dump: (*Cloud).State() fake<p>.State, what the control endpoint answers;
//   - injected faults in Cloud.Faults (Faults: Inject, Clear), each fault a fake<p>.Fault that
//     embeds Rule (the operation and how many times), with constructors of one signature in every
//     fake: ServerErrors(op, status, times), Throttle(op, times, …), Deny(op);
//   - the requests answered in Cloud.Requests (Journal: All, For(op), Reset);
//   - control requests under ControlPrefix (Control): GET state, POST and DELETE faults, GET and
//     DELETE requests.
//
// A fake splits its cloud by resource (instances, volumes, networks …) into types over one shared
// state, as a provider would be split, so no type grows into one that does everything; a
// capability the driver contract gains (stopping and starting machines) becomes another such
// type and more states of the instances.
package fakekit
