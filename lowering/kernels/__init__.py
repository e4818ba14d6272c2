"""The forms of kernel code, one module each, and the shared writer they
emit through (``writer``); ``registry`` lists them in priority order and
chooses a kernel's forms.  ``lowering.codegen`` assembles the kernels'
texts into a module."""
