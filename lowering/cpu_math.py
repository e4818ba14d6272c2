"""float32 exp, log, sin, cos and tanh for the CPU device, in plain arithmetic.

Slang's C++ target calls glibc's scalar ``expf``/``logf``/``sinf``/``tanhf``
once per element, and a call in the body stops g++ -O3 from vectorising the
per-thread point loop (lowering.threads): transcendental chains ran 6x slower
than numpy.  slangpy gives no way to pass ``-fno-math-errno``/``-march`` to
g++ (``downstream_args`` never reaches its command line, measured), and its
``floating_point_mode=fast`` adds ``-ffast-math`` to the whole module, whose
finite-math assumptions break the inf/NaN handling programs rely on; so the
vectorised libmvec routines are out of reach.  These helpers are branch-free
range reduction + polynomial (Cephes' float32 minimax coefficients), which
g++ inlines and vectorises with the rest of the loop.  Targets without
``polynomial_math`` (lowering.targets) keep the built-ins: ``source`` gives
each target only its own definitions of the names in ``FUNCTIONS``.  lavapipe
has ``polynomial_math`` too, for accuracy: its built-in log and tanh were ~100x
less accurate (the same tests run there).

Accuracy (tests/lowering/test_cpu_math.py): within 2 ulp of the exact result
(measured at most 1.5), sin and cos for |x| < 2^32; exp overflows to inf and
underflows through subnormals to 0, log(0) = -inf, log(x < 0) = NaN, tanh
saturates to +-1, and sin/cos of inf or NaN is NaN.  Past |x| = 2^32 neighbouring float32 values
lie 512 apart (some 80 periods), no value there means anything, and sin/cos
return NaN rather than an arbitrary number.
"""
from __future__ import annotations

from .targets import Target

# name printed for a float32 call of each function (defined by ``source``)
FUNCTIONS = {"exp": "exp_f32", "log": "log_f32", "sin": "sin_f32", "cos": "cos_f32", "tanh": "tanh_f32"}
# each name's polynomial form
_POLYNOMIAL = {"exp": "cpu_exp(x)", "log": "cpu_log(x)", "sin": "cpu_sin_quadrant(x, 0)",
               "cos": "cpu_sin_quadrant(x, 1)", "tanh": "cpu_tanh(x)"}

SOURCE = """\
// float32 exp/log/sin/cos/tanh: branch-free polynomials on the CPU device so
// that g++ vectorises the point loop (glibc's scalar calls stop it); see
// lowering/cpu_math.py for the accuracy they are tested to.
// All [ForceInline]: g++ leaves a large helper called from several places
// uninlined, and a call in the loop stops its vectorisation.
// select(c, a, b) as bit operations: g++ turns a float ?: into a branch, sinks
// each arm's arithmetic into it and then, as float arithmetic may trap, can
// no longer merge it back, which stops vectorisation of the whole loop
[ForceInline] float pick(bool c, float a, float b)
{
    uint mask = 0u - uint(c);
    return asfloat((asuint(a) & mask) | (asuint(b) & ~mask));
}

[ForceInline] float cpu_exp(float x)
{
    // e^x = 2^n e^r, |r| <= ln2/2; 2^n as two normal halves so that results
    // overflow to inf and round once into subnormals
    float xc = pick(x > 88.8f, 88.8f, pick(x < -104.0f, -104.0f, x));  // NaN stays NaN
    float t = xc * 1.44269504088896341f;
    t = pick(t == t, t, 0.0f);
    int n = int(t + pick(t < 0.0f, -0.5f, 0.5f));
    float fn = float(n);
    float r = (xc - fn * 0.693359375f) - fn * -2.12194440e-4f;  // ln2 in two parts: fn * 0.693359375 is exact
    float p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r
               + 1.6666665459e-1f) * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int half = n >> 1;
    return p * asfloat(uint(half + 127) << 23) * asfloat(uint(n - half + 127) << 23);
}

[ForceInline] float cpu_log(float x)
{
    // x = 2^e m, sqrt(1/2) <= m < sqrt(2); subnormals are scaled by 2^23 first
    bool subnormal = x < 1.17549435e-38f;
    uint bits = asuint(pick(subnormal, x * 8388608.0f, x));
    float m = asfloat((bits & 0x007fffffu) | 0x3f000000u);
    bool low = m < 0.707106781186547524f;
    float e = float(int(bits >> 23) - 126 - select(subnormal, 23, 0) - select(low, 1, 0));
    m = pick(low, m + m, m) - 1.0f;
    float z = m * m;
    float y = ((((((((7.0376836292e-2f * m - 1.1514610310e-1f) * m + 1.1676998740e-1f) * m - 1.2420140846e-1f) * m
                   + 1.4249322787e-1f) * m - 1.6668057665e-1f) * m + 2.0000714765e-1f) * m - 2.4999993993e-1f) * m
              + 3.3333331174e-1f) * m * z;
    y = y + e * -2.12194440e-4f - 0.5f * z;
    float r = (m + y) + e * 0.693359375f;
    r = pick(x == asfloat(0x7F800000u), x, r);
    r = pick(x == 0.0f, asfloat(0xFF800000u), r);
    return pick(x >= 0.0f, r, asfloat(0x7FC00000u));  // negative or NaN
}

[ForceInline] float cpu_sin_quadrant(float x, int shift)
{
    // sin(x + shift pi/2): x - j pi/2 in double with pi/2 in 20-bit parts
    // (j pi/2 exact for |j| < 2^33), j and j mod 4 rounded by the 1.5 * 2^52 trick
    double xd = double(x);
    double j = unfolded(xd * 0.6366197723675814l + 6755399441055744.0l, xd) - 6755399441055744.0l;
    double j4 = unfolded((j * 0.25l - 0.375l) + 6755399441055744.0l, j) - 6755399441055744.0l;
    int q = (int(j - 4.0l * j4) + shift) & 3;
    float r = float((((xd - j * 1.5707950592041016l) - j * 1.2675900507019833e-06l) - j * 7.443542310303641e-13l)
                    - j * 5.170182981794105e-19l);
    float z = r * r;
    float s = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
    float c = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z
              - 0.5f * z + 1.0f;
    float v = pick((q & 1) != 0, c, s);
    v = pick((q & 2) != 0, -v, v);
    v = pick(x == 0.0f && shift == 0, x, v);  // sin(-0) = -0
    return pick(abs(x) < 4294967296.0f, v, asfloat(0x7FC00000u));  // also inf and NaN
}

[ForceInline] float cpu_tanh(float x)
{
    // odd polynomial near 0 (1 - 2/(e^2x + 1) cancels there), else saturating form
    float z = x * x;
    float near0 = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                   - 3.33332819422e-1f) * z * x + x;
    float far = 1.0f - 2.0f / (cpu_exp(2.0f * abs(x)) + 1.0f);
    near0 = pick(x == 0.0f, x, near0);  // tanh(-0) = -0
    return pick(abs(x) < 0.625f, near0, pick(x < 0.0f, -far, far));
}

"""


def source(target: Target) -> str:
    """Slang defining each name of ``FUNCTIONS`` for ``target``: the
    polynomials above where it has ``polynomial_math``, the built-ins elsewhere;
    and ``unfolded(a, b)``, which is ``a`` (``b`` only where ``a`` is NaN) in a
    form the target's compiler cannot see through where it
    ``folds_float_identities`` (so ``unfolded(x + K, x) - K`` rounds x), and
    plain ``a`` elsewhere (a select there costs the CPU device's loops speed)."""
    keep = "select(a == a, a, b)" if target.folds_float_identities else "a"
    barrier = "".join(f"[ForceInline] {t} unfolded({t} a, {t} b) {{ return {keep}; }}\n" for t in ("float", "double"))
    calls = _POLYNOMIAL if target.polynomial_math else {name: f"{name}(x)" for name in FUNCTIONS}
    wrappers = "".join(f"[ForceInline] float {FUNCTIONS[name]}(float x) {{ return {call}; }}\n"
                       for name, call in calls.items())
    return barrier + (SOURCE if target.polynomial_math else "") + wrappers
