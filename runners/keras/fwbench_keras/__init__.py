"""fwbench's Keras 3 side: the built-in models defined once in Keras (models), and the Keras runners, one per backend."""
