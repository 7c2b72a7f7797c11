"""An example trainer package for `tfdist jobs submit training` and `tfdist local train`."""
