from models.unet import UNet, check_image_size

__all__ = ["UNet", "check_image_size"]
