"""The diagonal state space model of S4D (Gu, Gupta, Goel & Ré 2022), per channel c and complex mode n:

    x_t = Ā x_{t-1} + B̄ u_t,   y_t = 2 Re(C x_t)   <=>   y = K * u,   K_l = 2 Re(Σ_n C_n B̄_n Ā_n^l)

- ``s4d_kernel_naive``: K term by term (C·N/2·T complex exponentials); the reference for ``s4d_kernel``;
- ``s4d_kernel``: K by a blocked Vandermonde product (two √T tables, one matmul); convolved by ``ops.long_conv``;
- ``s4d_recurrence``: the recurrence one step at a time; the reference for the convolution form, and its carried
  state (``initial_state`` in, ``final_state`` out) the reference for ``s4d_state_response`` and ``s4d_final_state``,
  the state contract of the convolution form.
"""

from markovformer.ops.s4d.naive import s4d_kernel_naive, s4d_recurrence
from markovformer.ops.s4d.state import s4d_final_state, s4d_state_response
from markovformer.ops.s4d.vandermonde import s4d_kernel

__all__ = ["s4d_final_state", "s4d_kernel", "s4d_kernel_naive", "s4d_recurrence", "s4d_state_response"]
