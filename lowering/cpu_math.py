"""float32 transcendentals (exp, log, sin, cos, tanh, the inverse and
hyperbolic functions, log2, log10, pow) for the CPU device and lavapipe, in
plain arithmetic.

Slang's C++ target calls glibc's scalar ``expf``/``logf``/``sinf``/``tanhf``
once per element, and a call in the body stops g++ -O3 from vectorising the
per-thread point loop (lowering.threads): transcendental chains ran 6x slower
than numpy.  slangpy drops the device's ``downstream_args`` (``-march`` now
reaches g++ through lowering.compiler_cache's wrapper instead), and its
``floating_point_mode=fast`` adds ``-ffast-math`` to the whole module, whose
finite-math assumptions break the inf/NaN handling programs rely on; so the
vectorised libmvec routines are out of reach.  These helpers are branch-free
range reduction + polynomial (Cephes' float32 minimax coefficients), which
g++ inlines and vectorises with the rest of the loop (``VECTORISED``; the
CPU device keeps glibc's accurate pow, log2, arcsinh...: ours, partly in
double, ran slower there).  Targets without ``polynomial_math``
(lowering.targets) keep the built-ins: ``source`` gives each target only its
own definitions of the names in ``FUNCTIONS``.  lavapipe takes every function
here, for accuracy (``accurate_builtins``): its built-in log and tanh were
~100x less accurate, arcsin and arccos 3800 ulp off, pow 60 (the same tests
run there).  Where a float32 formula cancels (arcsin near 1/2, arcsinh's and arccosh's logs,
pow's y log x, sinh/cosh near overflow) the helpers compute in double with
+ - * / only: lavapipe's double transcendentals are wrong, its double
arithmetic is not.

Accuracy (tests/lowering/test_cpu_math.py): within 2 ulp of the exact result
(measured at most 1.5; the double-precision ones about 0.5), sin and cos for |x| < 2^32; exp overflows to inf and
underflows through subnormals to 0, log(0) = -inf, log(x < 0) = NaN, tanh
saturates to +-1, and sin/cos of inf or NaN is NaN.  Past |x| = 2^32 neighbouring float32 values
lie 512 apart (some 80 periods), no value there means anything, and sin/cos
return NaN rather than an arbitrary number.
"""
from __future__ import annotations

from .targets import Target

# name printed for a float32 call of each function (defined by ``source``)
FUNCTIONS = {name: f"{name}_f32" for name in ("exp", "log", "log2", "log10", "sin", "cos", "tanh", "asin", "acos",
                                               "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "pow")}
# each name's polynomial form, and the built-in's arguments (one, ``x``, where not listed)
_POLYNOMIAL = {"exp": "cpu_exp(x)", "log": "cpu_log(x)", "sin": "cpu_sin_quadrant(x, 0)",
               "cos": "cpu_sin_quadrant(x, 1)", "tanh": "cpu_tanh(x)",
               "log2": "float(cpu_log_double(x) * 1.4426950408889634l)",
               "log10": "float(cpu_log_double(x) * 0.4342944819032518l)",
               "asin": "cpu_asin(x)", "acos": "cpu_acos(x)", "atan": "cpu_atan(x)", "atan2": "cpu_atan2(y, x)",
               "sinh": "cpu_sinh(x)", "cosh": "cpu_cosh(x)", "asinh": "cpu_asinh(x)", "acosh": "cpu_acosh(x)",
               "atanh": "cpu_atanh(x)", "pow": "cpu_pow(x, y)"}
_ARGUMENTS = {"atan2": "y, x", "pow": "x, y"}
# the float32 polynomials g++ vectorises, faster than glibc's scalar calls on the
# CPU device (targets.polynomial_math); the rest replace inaccurate built-ins only
# (targets.accurate_builtins)
VECTORISED = ("exp", "log", "sin", "cos", "tanh", "atan", "atan2")

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


// pi and pi/2 as float32 plus the rest: hi - (v - lo) rounds once, near 0.5 ulp
static const float PI_HI = 3.14159274101257324f;
static const float PI_LO = -8.74227800037248e-8f;
static const float PIO2_HI = 1.57079637050628662f;
static const float PIO2_LO = -4.37113900018624e-8f;

[ForceInline] float with_sign_of(float magnitude, float x)
{
    // |magnitude| with x's sign bit (odd functions at -0 give -0)
    return asfloat((asuint(magnitude) & 0x7fffffffu) | (asuint(x) & 0x80000000u));
}

[ForceInline] float cpu_asin_small(float a)
{
    // arcsin on |a| <= 1/2: odd minimax polynomial
    float z = a * a;
    return ((((4.2163199048e-2f * z + 2.4181311049e-2f) * z + 4.5470025998e-2f) * z + 7.4953002686e-2f) * z
            + 1.6666752422e-1f) * z * a + a;
}

[ForceInline] float cpu_asin(float x)
{
    // |x| > 1/2: arcsin a = pi/2 - 2 arcsin(sqrt((1 - a) / 2)); |x| > 1 gives NaN through the sqrt
    // in double: pi/2 - 2 arcsin(..) cancels up to 2 bits near |x| = 1/2
    float a = abs(x);
    double h = sqrt(double(0.5f * (1.0f - a)));
    double z = h * h;
    double small = ((((4.2163199048e-2l * z + 2.4181311049e-2l) * z + 4.5470025998e-2l) * z + 7.4953002686e-2l) * z
                    + 1.6666752422e-1l) * z * h + h;
    float far = float(1.5707963267948966l - 2.0l * small);
    return with_sign_of(pick(a > 0.5f, far, cpu_asin_small(a)), x);
}

[ForceInline] float cpu_acos(float x)
{
    float a = cpu_asin_small(sqrt(0.5f * (1.0f - abs(x))));  // NaN past |x| = 1
    float far = pick(x < 0.0f, PI_HI - (2.0f * a - PI_LO), 2.0f * a);
    return pick(abs(x) > 0.5f, far, PIO2_HI - (cpu_asin_small(x) - PIO2_LO));
}

[ForceInline] float cpu_atan_positive(float t)
{
    // arctan t for t >= 0 (inf and NaN too): reduced to |z| <= tan(pi/8) by
    // arctan t = pi/2 + arctan(-1/t) or pi/4 + arctan((t - 1)/(t + 1))
    bool far = t > 2.414213562373095f;
    bool middle = t > 0.4142135623730950f;
    float z = pick(far, -1.0f / t, pick(middle, (t - 1.0f) / (t + 1.0f), t));
    float base_hi = pick(far, PIO2_HI, pick(middle, 0.5f * PIO2_HI, 0.0f));
    float base_lo = pick(far, PIO2_LO, pick(middle, 0.5f * PIO2_LO, 0.0f));
    float w = z * z;
    float p = (((8.05374449538e-2f * w - 1.38776856032e-1f) * w + 1.99777106478e-1f) * w - 3.33329491539e-1f) * w * z;
    return base_hi + ((p + base_lo) + z);
}

[ForceInline] float cpu_atan(float x)
{
    return with_sign_of(cpu_atan_positive(abs(x)), x);
}

[ForceInline] float cpu_atan2(float y, float x)
{
    // the angle of the smaller |coordinate| over the larger one, then its quadrant;
    // 0/0 as 0 and inf/inf as 1 (numpy: atan2(inf, inf) = pi/4), x's sign bit for -0
    float ax = abs(x);
    float ay = abs(y);
    float big = max(ax, ay);
    float q = min(ax, ay) / big;
    q = pick(big == 0.0f, 0.0f, pick(ax == ay, 1.0f, q));
    float a = cpu_atan_positive(q);
    a = pick(ay > ax, PIO2_HI - (a - PIO2_LO), a);
    a = pick((asuint(x) & 0x80000000u) != 0u, PI_HI - (a - PI_LO), a);
    return pick(x == x, pick(y == y, with_sign_of(a, y), y), x);
}

[ForceInline] float cpu_sinh(float x)
{
    // odd polynomial for |x| <= 1 (e - 1/e cancels there), else (e - 1/e) / 2
    float a = abs(x);
    float z = x * x;
    float near0 = ((2.03721912945e-4f * z + 8.33028376239e-3f) * z + 1.66667160211e-1f) * z * x + x;
    double e = cpu_exp_double(double(a));  // in double: no overflow before sinh's own
    return pick(a > 1.0f, with_sign_of(float(0.5l * e - 0.5l / e), x), near0);
}

[ForceInline] float cpu_cosh(float x)
{
    double e = cpu_exp_double(double(abs(x)));
    return pick(x == x, float(0.5l * e + 0.5l / e), x);
}

[ForceInline] float cpu_asinh(float x)
{
    // odd polynomial for |x| < 1/2, else log(a + sqrt(a^2 + 1)) in double (in float32
    // the log's absolute error is 3 ulp of the result near 1/2)
    float a = abs(x);
    float z = x * x;
    float near0 = (((2.0122003309e-2f * z - 4.2699340972e-2f) * z + 7.4847586088e-2f) * z - 1.6666288134e-1f)
                  * z * x + x;
    double t = double(a);
    float far = float(cpu_log_of_double(t + sqrt(t * t + 1.0l)));
    return with_sign_of(pick(a < 0.5f, near0, far), x);
}

[ForceInline] float cpu_acosh(float x)
{
    // near 1 a polynomial times sqrt(x - 1) (the log form cancels), then
    // log(x + sqrt((x - 1)(x + 1))) in double; NaN below 1
    float z = x - 1.0f;
    float near1 = ((((1.7596881071e-3f * z - 7.5272886713e-3f) * z + 2.6454905019e-2f) * z - 1.1784741703e-1f) * z
                   + 1.4142135263f) * sqrt(z);
    double t = double(x);
    float far = float(cpu_log_of_double(t + sqrt((t - 1.0l) * (t + 1.0l))));
    return pick(x >= 1.0f, pick(z < 0.5f, near1, far), asfloat(0x7FC00000u));
}

[ForceInline] float cpu_atanh(float x)
{
    // odd polynomial for |x| < 1/2, else log((1 + x) / (1 - x)) / 2 (+-inf at +-1, NaN past)
    float z = x * x;
    float near0 = ((((1.81740078349e-1f * z + 8.24370301058e-2f) * z + 1.46691431730e-1f) * z + 1.99782164500e-1f) * z
                   + 3.33337300303e-1f) * z * x + x;
    double t = double(x);
    return pick(abs(x) < 0.5f, near0, float(0.5l * cpu_log_of_double((1.0l + t) / (1.0l - t))));
}

[ForceInline] double cpu_log_double(float x)
{
    // log x in double arithmetic, only + - * / (lavapipe's double transcendentals
    // are wrong): x = 2^e m, sqrt(1/2) <= m < sqrt(2), log m = 2 atanh((m - 1)/(m + 1))
    // as its series (|s| < 0.172: 1e-12 relative).  -inf at 0, NaN below.
    bool subnormal = x < 1.17549435e-38f;
    uint bits = asuint(pick(subnormal, x * 8388608.0f, x));
    float mf = asfloat((bits & 0x007fffffu) | 0x3f000000u);
    bool low = mf < 0.707106781186547524f;
    double e = double(int(bits >> 23) - 126 - select(subnormal, 23, 0) - select(low, 1, 0));
    double m = double(pick(low, mf + mf, mf));
    double s = (m - 1.0l) / (m + 1.0l);
    double s2 = s * s;
    double log_m = 2.0l * s * (1.0l + s2 * (0.3333333333333333l + s2 * (0.2l + s2 * (0.14285714285714285l
                   + s2 * (0.1111111111111111l + s2 * (0.09090909090909091l + s2 * 0.07692307692307693l))))));
    double special = double(pick(x == 0.0f, asfloat(0xFF800000u), pick(x >= 0.0f, x, asfloat(0x7FC00000u))));
    return select(x > 0.0f, select(x < asfloat(0x7F800000u), e * 0.6931471805599453l + log_m, special), special);
}

[ForceInline] double cpu_log_of_double(double d)
{
    // log d for d >= 0 in double: log of d's float32 rounding h, plus log(d / h) ~ (d - h) / h;
    // d past float32's range (2 x for asinh(x) near its top) is scaled by 2^-100 first
    bool big = d > 1.0e30l;
    double scaled = select(big, d * 7.888609052210118e-31l, d);
    float h = float(scaled);
    double rest = (scaled - double(h)) / double(h);
    return cpu_log_double(h) + select(h > 0.0f, select(h < asfloat(0x7F800000u), rest, 0.0l), 0.0l)
           + select(big, 69.31471805599453l, 0.0l);
}

[ForceInline] double cpu_exp_double(double t)
{
    // e^t in double arithmetic for t up to where float32 results are inf or 0
    // (clamped to [-110, 90]): t = n ln2 + r, |r| <= ln2/2, Taylor to r^11 (2e-13)
    double tc = select(t > 90.0l, 90.0l, select(t < -110.0l, -110.0l, t));
    tc = select(tc == tc, tc, 0.0l);
    double n = unfolded(tc * 1.4426950408889634l + 6755399441055744.0l, tc) - 6755399441055744.0l;
    double r = (tc - n * 0.6931471803691238l) - n * 1.9082149292705877e-10l;
    double p = 1.0l + r * (1.0l + r * (0.5l + r * (1.6666666666666666e-1l + r * (4.1666666666666664e-2l
               + r * (8.333333333333333e-3l + r * (1.388888888888889e-3l + r * (1.984126984126984e-4l
               + r * (2.48015873015873e-5l + r * (2.7557319223985893e-6l + r * 2.755731922398589e-7l)))))))));
    int ni = int(n);
    int half = ni >> 1;
    double v = p * double(asfloat(uint(half + 127) << 23)) * double(asfloat(uint(ni - half + 127) << 23));
    return select(t == t, v, t);
}

[ForceInline] float cpu_pow(float x, float y)
{
    // x**y for x >= 0 (lowering.printer's ``power`` passes |x| and handles signs,
    // 0**0 and 1**y) as exp(y log x) in double: in float32 the error of log x is
    // multiplied by |y log x|, up to 88 ulp of the result
    return float(cpu_exp_double(double(y) * cpu_log_double(x)));
}
"""


def source(target: Target) -> str:
    """Slang defining each name of ``FUNCTIONS`` for ``target``: the helpers
    above for ``VECTORISED`` where it has ``polynomial_math`` and for all where
    its built-ins are not ``accurate_builtins``, the built-ins elsewhere;
    and ``unfolded(a, b)``, which is ``a`` (``b`` only where ``a`` is NaN) in a
    form the target's compiler cannot see through where it
    ``folds_float_identities`` (so ``unfolded(x + K, x) - K`` rounds x), and
    plain ``a`` elsewhere (a select there costs the CPU device's loops speed)."""
    keep = "select(a == a, a, b)" if target.folds_float_identities else "a"
    barrier = "".join(f"[ForceInline] {t} unfolded({t} a, {t} b) {{ return {keep}; }}\n" for t in ("float", "double"))
    def wrapper(name: str) -> str:
        arguments = _ARGUMENTS.get(name, "x").split(", ")
        own = not target.accurate_builtins or target.polynomial_math and name in VECTORISED
        call = _POLYNOMIAL[name] if own else f"{name}({', '.join(arguments)})"
        parameters = ", ".join(f"float {a}" for a in arguments)
        # the caller's rounding kept: acosh(1 + p) computes (1 + p) - 1, which the
        # optimiser would fold to p once the helper is inlined
        keep = "".join(f"{a} = unfolded({a}, asfloat(0x7FC00000u)); " for a in arguments
                       if own and target.folds_float_identities)
        return f"[ForceInline] float {FUNCTIONS[name]}({parameters}) {{ {keep}return {call}; }}\n"

    helpers = SOURCE if target.polynomial_math or not target.accurate_builtins else ""
    return barrier + helpers + "".join(wrapper(name) for name in FUNCTIONS)
