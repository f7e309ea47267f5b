"""`nki.compiler.frontend`: the suite's trace-only tests (`@pytest.mark.trace_only`)
call `ParserFrontend().compile(kernel, inputs=..., target=..., lnc=...)`.
nkicc traces and compiles the kernel there (nkicc.suite.trace_only): a kernel
that does not compile fails the test with nkicc's error."""
from nkicc.suite import trace_only


class NKIFrontend:
    """The front ends' common base, as the suite names it."""

    def compile(self, kernel, inputs=None, target=None, lnc=1, **_artifact_options):
        return trace_only(kernel, inputs or {}, target, lnc)


class ParserFrontend(NKIFrontend):
    """The front end the suite's tracer asks for."""
